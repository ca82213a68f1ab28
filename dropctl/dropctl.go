package dropctl

import (
	"errors"
	"fmt"
	"maps"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/loader"
)

// Program is the Config["program"] of fast-drop attachments: what tells
// them apart from xdpdrop's other programs.
const Program = "fastdrop"

// headroom is how many times the rules of the set a program is loaded
// for its tables have room for, so that rules added later fit without a
// reload.
const headroom = 2

// Open reopens the pinned fast-drop attachment of iface under pinRoot and
// its engine. It wraps loader.ErrNotPinned when nothing of xdpdrop's is
// pinned there, and loader.ErrStale for pins of an interface that went
// away (loader.RemoveStalePins removes them).
func Open(iface, pinRoot string) (*loader.Attachment, *fastdrop.Engine, error) {
	att, err := OpenAttachment(iface, pinRoot)
	if err != nil {
		return nil, nil, err
	}
	eng, err := OpenEngine(att)
	if err != nil {
		return nil, nil, errors.Join(err, att.Close())
	}
	return att, eng, nil
}

// OpenAttachment is the attachment half of Open: the pins, checked to be
// fast drop's, without the engine.
func OpenAttachment(iface, pinRoot string) (*loader.Attachment, error) {
	att, err := loader.Open(iface, pinRoot)
	if err != nil {
		return nil, err
	}
	if p := att.Meta().Config["program"]; p != Program {
		att.Close()
		return nil, fmt.Errorf("%s runs xdpdrop's %q program, not fast drop: detach it first ('xdpdrop detach --iface %s')", iface, p, iface)
	}
	return att, nil
}

// OpenEngine opens the engine of a fast-drop attachment's pinned maps.
func OpenEngine(att *loader.Attachment) (*fastdrop.Engine, error) {
	eng, err := fastdrop.Open(att.MapsDir())
	if err != nil {
		return nil, OtherLayoutAdvice(err, att.Interface())
	}
	return eng, nil
}

// OtherLayoutAdvice names the commands that replace pins of another
// version of xdpdrop (fastdrop.ErrOtherLayout); other errors pass as
// they are.
func OtherLayoutAdvice(err error, iface string) error {
	if !errors.Is(err, fastdrop.ErrOtherLayout) {
		return err
	}
	return fmt.Errorf("%w: xdpdrop detach --iface %s; xdpdrop drop --iface %s --rules FILE", err, iface, iface)
}

// ReloadIfFull passes err (of a change through old) on, unless it says the
// tables the program was loaded with are full (they are sized at load):
// then it loads the program again for the rule set that set returns (the
// whole set) and swaps it in (Reload). The old engine is closed first, so
// that its copies of the tables (of millions of rules, perhaps) are not
// held beside the new ones.
func ReloadIfFull(att *loader.Attachment, old *fastdrop.Engine, err error, set func() (*fastdrop.RuleSet, error)) (reloaded bool, _ error) {
	if !errors.Is(err, fastdrop.ErrCapacity) {
		return false, err
	}
	rs, err := set()
	if err == nil {
		old.Close()
		err = Reload(att, rs)
	}
	return err == nil, err
}

// Reload loads the fast-drop program anew with tables sized for rs, and
// replaces the attached one and its pinned maps with it atomically: every
// packet meets the old program or the new one. The AF_XDP sockets stay:
// the new program takes over the pinned socket maps (a running xdpdrop
// redirect keeps its sockets), and the bans in force (fastdrop.CopyBans).
func Reload(att *loader.Attachment, rs *fastdrop.RuleSet) error {
	opts := fastdrop.CapacityFor(rs, headroom)
	socks, err := fastdrop.PinnedSocketMaps(att.MapsDir())
	if err != nil {
		return err
	}
	defer func() {
		for _, m := range socks {
			m.Close()
		}
	}()
	opts.SocketMaps = socks
	// The bans stay too: copied before the rules go in (their prefix
	// lengths are looked up), and once more after the swap for those
	// the old program made meanwhile.
	bans, err := fastdrop.PinnedBans(att.MapsDir())
	if err != nil {
		return err
	}
	defer bans.Close()
	eng, err := fastdrop.New(opts)
	if err != nil {
		return err
	}
	defer eng.Close()
	if _, err := eng.CopyBans(bans); err != nil {
		return err
	}
	if err := eng.Apply(rs); err != nil {
		return err
	}
	if err := att.ReplaceWithMaps(eng.Program(), eng.Maps()); err != nil {
		return err
	}
	_, err = eng.CopyBans(bans)
	return err
}

// Attach loads the fast-drop program with tables sized for rs, puts rs in
// force and attaches it as opts say (opts.Maps is set here; opts.Config
// gets "program" and "requested_mode"). The engine is closed on return:
// the pins hold the program and its maps.
func Attach(rs *fastdrop.RuleSet, opts loader.Options) (*loader.Attachment, error) {
	return AttachDst(rs, opts, false)
}

// AttachDst is Attach, with the destination prefix table
// (fastdrop.Options.DstPrefixes) whether rs needs it or not when dst is
// set: the agent attaches so where FlowSpec rules go, so that the first
// destination-only route does not load the program again.
func AttachDst(rs *fastdrop.RuleSet, opts loader.Options, dst bool) (*loader.Attachment, error) {
	fopts := fastdrop.CapacityFor(rs, headroom)
	fopts.DstPrefixes = fopts.DstPrefixes || dst
	eng, err := fastdrop.New(fopts)
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	if err := eng.Apply(rs); err != nil {
		return nil, err
	}
	opts.Maps = eng.Maps()
	opts.Config = maps.Clone(opts.Config)
	if opts.Config == nil {
		opts.Config = map[string]string{}
	}
	opts.Config["program"] = Program
	opts.Config["requested_mode"] = opts.Mode.String()
	return loader.Attach(eng.Program(), opts)
}

// ApplyOrigin replaces the rules of origin on a running fast drop
// (fastdrop.Engine.ApplyOrigin: the rules of every other origin stay in
// force; rs.Policy and rs.Malformed, where not zero, become the
// program's), and loads the program again with bigger tables if they
// outgrow it, keeping every origin's rules (WithOrigin). It reports
// whether it reloaded; then eng is closed.
func ApplyOrigin(att *loader.Attachment, eng *fastdrop.Engine, origin string, rs *fastdrop.RuleSet) (reloaded bool, err error) {
	return ReloadIfFull(att, eng, eng.ApplyOrigin(origin, rs), func() (*fastdrop.RuleSet, error) {
		return WithOrigin(eng, origin, rs)
	})
}

// WithOrigin returns the rule set in force on eng with the rules of
// origin replaced by rs's, and rs's policies where not zero: what eng
// would hold after ApplyOrigin(origin, rs), as one whole set (for a
// reload).
func WithOrigin(eng *fastdrop.Engine, origin string, rs *fastdrop.RuleSet) (*fastdrop.RuleSet, error) {
	cur, err := eng.RuleSet()
	if err != nil {
		return nil, err
	}
	out := &fastdrop.RuleSet{Policy: cur.Policy, Malformed: cur.Malformed}
	if rs.Policy != 0 {
		out.Policy = rs.Policy
	}
	if rs.Malformed != 0 {
		out.Malformed = rs.Malformed
	}
	out.Rules = make([]fastdrop.Rule, 0, len(cur.Rules)+len(rs.Rules))
	for _, r := range cur.Rules {
		if r.Origin != origin {
			out.Rules = append(out.Rules, r)
		}
	}
	for _, r := range rs.Rules {
		r.Origin = origin
		out.Rules = append(out.Rules, r)
	}
	return out, nil
}
