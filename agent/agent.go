package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// Options configure an Agent beyond its Config.
type Options struct {
	// Logger gets one line per event (default: slog.Default()).
	Logger *slog.Logger
	// plane replaces the kernel in tests of the reconcile logic.
	plane dataplane
}

// Agent keeps the interfaces of a Config filtered. Its methods are safe
// for concurrent use.
type Agent struct {
	cfg   *Config
	log   *slog.Logger
	plane dataplane
	bgp   *speaker // nil without bgp

	dirty  chan struct{} // a reconcile is wanted
	reload chan struct{} // reread every rule file (SIGHUP)

	mu     sync.Mutex
	files  map[string]*fileState // by path
	ifaces map[string]*ifaceState
	routes []RouteStatus // the FlowSpec routes of the last reconcile
	start  time.Time
	swaps  uint64

	// inherited: the FlowSpec rules a previous agent left in force, by
	// interface, kept until inheritUntil (the stale time after start)
	// unless the routes held cover them first (see inheritedFor).
	inherited    map[string][]fastdrop.Rule
	inheritUntil time.Time

	// trCache holds the translation of every route held, by family, NLRI
	// and actions: a route is translated once, not at every reconcile.
	// Only the reconcile (one goroutine) uses it.
	trCache map[string]cachedTranslation
}

type cachedTranslation struct {
	tr  Translation
	err error
}

// The origins of the agent's rules (fastdrop.Rule.Origin): the rules of
// its rule files and inline rules, and those of its FlowSpec routes. They
// are swapped separately (a BGP change never touches the file rules) and
// leave every other origin's rules alone (xdpdrop drop and rules add, "drop";
// xdpdrop redirect, "redirect"). Origins order the compound rules: the
// drop command's first, then other origins by name (so OriginFiles before
// OriginFlowSpec: "agent:fi" < "agent:fl"), then xdpdrop redirect's.
const (
	OriginFiles    = "agent:file"
	OriginFlowSpec = "agent:flowspec"
)

// maxRefusedListed is how many refused file rules status lists (all are
// counted).
const maxRefusedListed = 100

// fileState is a rule file: the rules last read from it without error,
// and the error of the last read, if it failed.
type fileState struct {
	rules  *fastdrop.RuleSet // last good; nil until one read succeeded
	sum    [sha256.Size]byte // of the text rules were read from
	loaded time.Time         // when rules were read
	err    error             // the last read's error; rules stay in force
}

// ifaceState is what is in force on an interface: the two halves, each
// swapped only when what it is built from changed.
type ifaceState struct {
	mode    string
	policy  string // policy/malformed in force
	err     error  // the last swap's error (either half)
	applied time.Time

	// The file half (OriginFiles).
	fileIn       bool   // in force
	fileKey      string // what the half in force was built from
	fileFailed   bool   // the last build or swap failed
	fileTried    string // what it was built from
	fileRules    int    // rules in force
	fileCompound int    // of them compound
	refused      []string
	nrefused     int
	refusedByBGP bool // a refused rule's prefix is a FlowSpec rule's: retry after BGP changes

	// The BGP half (OriginFlowSpec).
	bgpIn    bool
	bgpWant  []string          // the FlowSpec rules wanted (before collisions)
	bgpRules int               // rules in force
	bgpKeys  map[string]string // routes refused here (collisions), by routeKey: the reason
	// inherited: how many of the BGP half's rules in force are a previous
	// agent's, kept for the stale time (0: none).
	inherited int
}

// New checks cfg and makes an agent; nothing is touched until Run.
func New(cfg *Config, opts Options) (*Agent, error) {
	if cfg == nil {
		return nil, errors.New("no config")
	}
	a := &Agent{
		cfg:    cfg,
		log:    opts.Logger,
		plane:  opts.plane,
		dirty:  make(chan struct{}, 1),
		reload: make(chan struct{}, 1),
		files:  map[string]*fileState{},
		ifaces: map[string]*ifaceState{},
		start:  time.Now(),
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.plane == nil {
		a.plane = &kernelPlane{pinRoot: cfg.PinRoot, cfg: cfg}
	}
	for _, ic := range cfg.Interfaces {
		a.ifaces[ic.Name] = &ifaceState{}
		for _, f := range ic.RuleFiles {
			a.files[f] = &fileState{}
		}
	}
	if cfg.BGP != nil {
		a.bgp = newSpeaker(cfg.BGP, a.log, a.markDirty)
	}
	return a, nil
}

// Reload rereads every rule file and reconciles, as SIGHUP does.
func (a *Agent) Reload() {
	select {
	case a.reload <- struct{}{}:
	default:
	}
}

func (a *Agent) markDirty() {
	select {
	case a.dirty <- struct{}{}:
	default:
	}
}

// Run filters until ctx ends: it reads the rule files, starts the BGP
// speaker and the status endpoint, and reconciles after every change.
// It returns an error only for what keeps it from starting; on return the
// last rule sets stay in force.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c, ok := a.plane.(interface{ close() }); ok {
		defer c.close() // the engines it keeps open; the rules stay in force
	}
	w, err := a.watch()
	if err != nil {
		return err
	}
	defer w.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if a.cfg.Status.Listen != "" {
		srv, err := a.serveStatus(ctx)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); <-ctx.Done(); srv.Close() }()
	}
	a.readFiles("start")
	a.inherit()
	a.reconcile()
	if a.bgp != nil {
		if err := a.bgp.start(ctx); err != nil {
			return err
		}
		defer a.bgp.stop()
	}
	a.log.Info("agent running", "config", a.cfg.path, "interfaces", len(a.cfg.Interfaces), "bgp", a.bgp != nil)
	stale := time.NewTimer(time.Hour)
	defer stale.Stop()
	for {
		a.armStale(stale)
		select {
		case <-ctx.Done():
			a.log.Info("agent stopping: the rules in force stay in force")
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("the rule file watcher stopped")
			}
			if a.isRuleFile(ev.Name) {
				a.debounce(ctx)
				a.readFiles("changed")
				a.reconcile()
			}
		case err, ok := <-w.Errors:
			if ok {
				a.log.Warn("rule file watcher", "error", err)
			}
		case <-a.reload:
			a.readFiles("reload")
			a.reconcile()
		case <-a.dirty:
			a.debounce(ctx)
			a.reconcile()
		case <-stale.C:
			a.reconcile()
		}
	}
}

// debounce waits for more changes of a burst, so that it is one swap.
func (a *Agent) debounce(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(a.cfg.Debounce):
	}
	select { // what came meanwhile is in this pass
	case <-a.dirty:
	default:
	}
}

// armStale sets t to fire when the next stale route expires.
func (a *Agent) armStale(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	d := time.Hour
	if a.bgp != nil {
		if next, ok := a.bgp.nextExpiry(); ok {
			d = max(time.Until(next), time.Millisecond)
		}
	}
	a.mu.Lock()
	if len(a.inherited) > 0 {
		d = min(d, max(time.Until(a.inheritUntil), time.Millisecond))
	}
	a.mu.Unlock()
	t.Reset(d)
}

// watch watches the directories of the rule files: editors and config
// management replace files by renaming, which a watch on the file itself
// would lose.
func (a *Agent) watch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch the rule files: %w", err)
	}
	dirs := map[string]bool{}
	for f := range a.files {
		dirs[filepath.Dir(f)] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch the rule files in %s: %w", d, err)
		}
	}
	return w, nil
}

func (a *Agent) isRuleFile(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.files[filepath.Clean(name)]
	if !ok {
		for f := range a.files {
			if filepath.Clean(f) == filepath.Clean(name) {
				return true
			}
		}
	}
	return ok
}

// readFiles reads every rule file; a file that fails keeps its last good
// rules, and the error is logged and kept for status. A file whose text
// did not change is not parsed again (its rules stay, and so does the
// file half of the interfaces it feeds).
func (a *Agent) readFiles(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for path, fs := range a.files {
		b, err := os.ReadFile(path)
		var rs *fastdrop.RuleSet
		sum := sha256.Sum256(b)
		if err == nil && fs.rules != nil && sum == fs.sum {
			fs.err = nil
			continue
		}
		if err == nil {
			rs, err = fastdrop.Parse(bytes.NewReader(b), path)
		} else {
			err = fmt.Errorf("read rules: %w", err)
		}
		if err != nil {
			if fs.err == nil || fs.err.Error() != err.Error() {
				a.log.Error("rule file not loaded: the last good rules stay in force", "file", path, "error", err, "rules_in_force", ruleCount(fs.rules))
			}
			fs.err = err
			continue
		}
		if fs.err != nil || fs.rules == nil || why != "start" {
			a.log.Info("rule file loaded", "file", path, "rules", len(rs.Rules), "why", why)
		}
		fs.rules, fs.sum, fs.err, fs.loaded = rs, sum, nil, time.Now()
	}
}

func ruleCount(rs *fastdrop.RuleSet) int {
	if rs == nil {
		return 0
	}
	return len(rs.Rules)
}

// reconcile puts in force what changed: the file half of an interface
// (OriginFiles) when its files changed, the BGP half (OriginFlowSpec,
// the FlowSpec rules in RFC 8955 order) when the routes' rules changed.
// A BGP change swaps only the BGP half; the file rules (a million,
// perhaps) are neither rebuilt nor swapped.
func (a *Agent) reconcile() {
	for _, ic := range a.cfg.Interfaces {
		a.reconcileFiles(ic, false)
	}
	var routes []RouteStatus
	var bgpRules []fastdrop.Rule
	var owner []int
	if a.bgp != nil {
		a.bgp.expire(time.Now())
		routes, bgpRules, owner = a.flowSpecRules(a.fileCompoundMax())
	}
	for _, ic := range a.cfg.Interfaces {
		if a.cfg.appliesFlowSpec(ic.Name) {
			a.reconcileBGP(ic, routes, bgpRules, owner)
		} else {
			a.reconcileBGP(ic, nil, nil, nil) // none here (and none left by an earlier config)
		}
	}
	if a.bgp != nil {
		a.logRouteChanges(routes)
	}
	a.mu.Lock()
	a.routes = routes
	a.mu.Unlock()
	a.writeStatusFile()
}

// fileKey is what the file half of ic is built from: its files' texts
// (their sums) and the config.
func (a *Agent) fileKey(ic InterfaceConfig) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var sb strings.Builder
	for _, f := range ic.RuleFiles {
		if fs := a.files[f]; fs.rules != nil {
			fmt.Fprintf(&sb, "%x ", fs.sum[:8])
		} else {
			sb.WriteString("- ")
		}
	}
	return sb.String()
}

// reconcileFiles swaps the file half of ic if its files changed since it
// was put in force (or force). Prefix rules that another origin holds
// already are refused (listed in status), never the other's removed.
func (a *Agent) reconcileFiles(ic InterfaceConfig, force bool) {
	key := a.fileKey(ic)
	a.mu.Lock()
	st := a.ifaces[ic.Name]
	skip := !force && (st.fileIn && st.fileKey == key || st.fileFailed && st.fileTried == key)
	a.mu.Unlock()
	if skip {
		return
	}
	// A set that does not build is not tried again until a file changes;
	// a swap that failed is, at the next reconcile.
	fail := func(err error, final bool) {
		a.mu.Lock()
		st.err, st.fileFailed, st.fileTried = err, final, key
		a.mu.Unlock()
		a.log.Error("file rules not applied: the rules in force stay in force", "interface", ic.Name, "error", err)
	}
	rs, err := a.ruleSetFor(ic)
	if err != nil {
		fail(err, true)
		return
	}
	t0 := time.Now()
	var refused []string
	byBGP := false
	var res applied
	for attempt := 0; ; attempt++ {
		res, err = a.plane.apply(ic, OriginFiles, rs)
		var ce *collisionError
		if !errors.As(err, &ce) || attempt == 3 {
			break
		}
		keep := rs.Rules[:0:0]
		for i := range rs.Rules {
			if why, ok := ce.refused[i]; ok {
				refused = append(refused, rs.Rules[i].String()+": "+why)
				byBGP = byBGP || strings.Contains(why, "origin "+OriginFlowSpec)
				a.log.Warn("file rule refused", "interface", ic.Name, "rule", rs.Rules[i].String(), "reason", why)
			} else {
				keep = append(keep, rs.Rules[i])
			}
		}
		rs = &fastdrop.RuleSet{Rules: keep, Policy: rs.Policy, Malformed: rs.Malformed}
	}
	if err != nil {
		fail(err, false)
		return
	}
	compound := 0
	for i := range rs.Rules {
		if !rs.Rules[i].IsPrefixOnly() {
			compound++
		}
	}
	a.mu.Lock()
	st.fileIn, st.fileKey, st.fileFailed, st.err = true, key, false, nil
	st.fileRules, st.fileCompound = len(rs.Rules), compound
	st.nrefused, st.refusedByBGP = len(refused), byBGP
	st.refused = refused[:min(len(refused), maxRefusedListed)]
	a.applied(st, res)
	a.mu.Unlock()
	a.log.Info(verbOf(res, "file rules replaced"), "interface", ic.Name, "origin", OriginFiles, "mode", res.Mode, "rules", len(rs.Rules), "refused", len(refused), "reloaded", res.Reloaded, "took", time.Since(t0).Round(time.Microsecond).String())
}

// applied notes a swap in st (a.mu held).
func (a *Agent) applied(st *ifaceState, res applied) {
	if res.Policy != "" {
		st.policy = res.Policy
	}
	if res.Mode != "" {
		st.mode = res.Mode
	}
	if !res.Noop {
		st.applied = time.Now()
		a.swaps++
	}
}

func verbOf(res applied, verb string) string {
	if res.Attached {
		return "attached"
	}
	return verb
}

// routeKey names a route in a pass's route list.
func routeKey(r *RouteStatus) string { return r.Neighbor + " " + r.Family + " " + r.NLRI }

// reconcileBGP swaps the BGP half of ic if its rules changed: rules, with
// owner[i] the index in routes of the route rule i comes from. A route
// with a prefix rule that another origin holds already is refused here
// as a whole (never installed narrower), with the reason in its status.
func (a *Agent) reconcileBGP(ic InterfaceConfig, routes []RouteStatus, rules []fastdrop.Rule, owner []int) {
	want := make([]string, len(rules))
	for i := range rules {
		want[i] = rules[i].String()
	}
	if a.inheritedFor(ic.Name, want, rules) {
		return // a previous agent's rules stay in force for now
	}
	a.mu.Lock()
	st := a.ifaces[ic.Name]
	same := st.bgpIn && slices.Equal(st.bgpWant, want)
	out := st.bgpKeys
	a.mu.Unlock()
	if same {
		markRefused(routes, out)
		return
	}
	out = map[string]string{}
	rs := &fastdrop.RuleSet{Rules: rules}
	t0 := time.Now()
	var res applied
	var err error
	for attempt := 0; ; attempt++ {
		res, err = a.plane.apply(ic, OriginFlowSpec, rs)
		var ce *collisionError
		if !errors.As(err, &ce) || attempt == 3 {
			break
		}
		for i, why := range ce.refused {
			out[routeKey(&routes[owner[i]])] = why
		}
		var keep []fastdrop.Rule
		for i := range rules {
			if _, gone := out[routeKey(&routes[owner[i]])]; !gone {
				keep = append(keep, rules[i])
			}
		}
		rs = &fastdrop.RuleSet{Rules: keep}
	}
	if err != nil {
		a.mu.Lock()
		st.err = err
		a.mu.Unlock()
		a.log.Error("FlowSpec rules not applied: the rules in force stay in force", "interface", ic.Name, "error", err)
		return
	}
	markRefused(routes, out)
	a.mu.Lock()
	retryFiles := st.refusedByBGP
	st.bgpIn, st.bgpWant, st.bgpKeys, st.bgpRules, st.err = true, want, out, len(rs.Rules), nil
	st.inherited = 0
	a.applied(st, res)
	a.mu.Unlock()
	if !res.Noop {
		a.log.Info(verbOf(res, "bgp rules replaced"), "interface", ic.Name, "origin", OriginFlowSpec, "mode", res.Mode, "rules", len(rs.Rules), "refused_routes", len(out), "reloaded", res.Reloaded, "took", time.Since(t0).Round(time.Microsecond).String())
	}
	if retryFiles {
		a.reconcileFiles(ic, true) // the FlowSpec rule that held a file rule's prefix may be gone
	}
}

// originReader is a dataplane that can say which rules of an origin are
// in force on an interface (nil, nil: none, or nothing attached).
type originReader interface {
	originRules(ic InterfaceConfig, origin string) ([]fastdrop.Rule, error)
}

// inherit takes note of the FlowSpec rules a previous agent left in force
// (it was stopped, killed or restarted; the rules stay when it goes): they
// are kept for the stale time, as graceful restart keeps a restarting
// neighbour's routes, instead of being cleared by the first swap, which
// comes before any session is up. They are not routes any more (their
// NLRI is not in the rules), so they are kept as they are, in their
// order, and no rule is put among them: the interface's FlowSpec rules
// stay exactly those until the routes held cover every one of them (the
// neighbours announced them again: the new rules go in at once, in RFC
// 8955 order) or the stale time ends (the rules of the routes held then
// replace them). Without a stale time they are cleared at once.
func (a *Agent) inherit() {
	if a.bgp == nil || a.cfg.BGP.StaleTime <= 0 {
		return
	}
	rd, ok := a.plane.(originReader)
	if !ok {
		return
	}
	until := time.Now().Add(a.cfg.BGP.StaleTime)
	for _, ic := range a.cfg.Interfaces {
		if !a.cfg.appliesFlowSpec(ic.Name) {
			continue
		}
		rules, err := rd.originRules(ic, OriginFlowSpec)
		if err != nil {
			a.log.Warn("the FlowSpec rules in force could not be read: the first swap replaces them", "interface", ic.Name, "error", err)
			continue
		}
		if len(rules) == 0 {
			continue
		}
		a.mu.Lock()
		if a.inherited == nil {
			a.inherited = map[string][]fastdrop.Rule{}
		}
		a.inherited[ic.Name], a.inheritUntil = rules, until
		a.mu.Unlock()
		a.log.Info("FlowSpec rules of a previous agent kept for the stale time", "interface", ic.Name, "origin", OriginFlowSpec, "rules", len(rules), "stale_time", a.cfg.BGP.StaleTime.String(), "until", until.Format(time.RFC3339))
	}
}

// inheritedFor reports whether the FlowSpec rules a previous agent left
// on iface stay in force instead of want (the rules of the routes held,
// in order): until the stale time ends, unless want has every one of
// them (then want is put in force as usual). While they stay, status
// counts them as the interface's FlowSpec rules in force.
func (a *Agent) inheritedFor(iface string, want []string, rules []fastdrop.Rule) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	inh, ok := a.inherited[iface]
	if !ok {
		return false
	}
	why := ""
	if !time.Now().Before(a.inheritUntil) {
		why = "the stale time ended"
	} else {
		// A destination-only route's rule in either of its forms (a
		// previous agent may have left it compound: dstplace.go).
		left := map[string]int{}
		for i := range rules {
			left[sameMatchKey(&rules[i])]++
		}
		covered := true
		for i := range inh {
			k := sameMatchKey(&inh[i])
			if left[k] == 0 {
				covered = false
				break
			}
			left[k]--
		}
		if covered {
			why = "the routes held have every one of them"
		}
	}
	st := a.ifaces[iface]
	if why != "" {
		delete(a.inherited, iface)
		a.log.Info("FlowSpec rules of a previous agent replaced", "interface", iface, "rules", len(inh), "why", why, "rules_now", len(want))
		return false
	}
	texts := make([]string, len(inh))
	for i := range inh {
		texts[i] = inh[i].String()
	}
	// In force already: the same rules wanted later need no swap.
	st.bgpIn, st.bgpWant, st.bgpRules, st.inherited = true, texts, len(inh), len(inh)
	return true
}

// markRefused marks the routes refused on an interface (out, by
// routeKey) as refused.
func markRefused(routes []RouteStatus, out map[string]string) {
	if len(out) == 0 {
		return
	}
	for i := range routes {
		if why, ok := out[routeKey(&routes[i])]; ok && routes[i].State == RouteAccepted {
			routes[i].State, routes[i].Reason, routes[i].Rules = RouteRefused, why, nil
		}
	}
}

func policyText(rs *fastdrop.RuleSet) string {
	if rs == nil {
		return ""
	}
	return rs.EffectivePolicy().String() + "/" + rs.EffectiveMalformed().String()
}

// ruleSetFor is the file half of an interface's rule set: the last good
// rules of each file, then the inline rules, with the policies the files
// and the config name (zero where none does: the interface's stay).
func (a *Agent) ruleSetFor(ic InterfaceConfig) (*fastdrop.RuleSet, error) {
	rs := &fastdrop.RuleSet{}
	a.mu.Lock()
	n := 0
	for _, f := range ic.RuleFiles {
		if fr := a.files[f].rules; fr != nil {
			n += len(fr.Rules)
		}
	}
	rs.Rules = make([]fastdrop.Rule, 0, n)
	for _, f := range ic.RuleFiles {
		if fr := a.files[f].rules; fr != nil {
			rs.Rules = append(rs.Rules, fr.Rules...)
			if fr.Policy != 0 {
				rs.Policy = fr.Policy
			}
			if fr.Malformed != 0 {
				rs.Malformed = fr.Malformed
			}
		}
	}
	a.mu.Unlock()
	if ic.Rules != "" {
		in, err := fastdrop.Parse(strings.NewReader(ic.Rules), "interface "+ic.Name+" rules")
		if err != nil {
			return nil, err
		}
		rs.Rules = append(rs.Rules, in.Rules...)
		if in.Policy != 0 {
			rs.Policy = in.Policy
		}
		if in.Malformed != 0 {
			rs.Malformed = in.Malformed
		}
	}
	if ic.Policy != "" {
		rs.Policy, _ = fastdrop.ParseAction(ic.Policy)
	}
	if ic.Malformed != "" {
		rs.Malformed, _ = fastdrop.ParseAction(ic.Malformed)
	}
	if err := rs.Validate(); err != nil {
		return nil, fmt.Errorf("the rules of %s together: %w", ic.Name, err)
	}
	return rs, nil
}

// fileCompoundMax is the largest number of compound file rules in force
// on an interface FlowSpec rules go to: what is left of the compound
// table is the room for them.
func (a *Agent) fileCompoundMax() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, ic := range a.cfg.Interfaces {
		if a.cfg.appliesFlowSpec(ic.Name) {
			n = max(n, a.ifaces[ic.Name].fileCompound)
		}
	}
	return n
}

// flowSpecRules translates the routes the speaker holds, orders them (RFC
// 8955 section 5.1) and takes the rules of as many as there is room for.
//
// It returns the routes' status, the rules, and for each rule the index
// of its route in the status. Each route is translated once (trCache).
func (a *Agent) flowSpecRules(fileCompound int) ([]RouteStatus, []fastdrop.Rule, []int) {
	held := a.bgp.routes()
	cache := make(map[string]cachedTranslation, len(held))
	type cand struct {
		st RouteStatus
		r  Route
		tr Translation
	}
	var cands []cand
	for _, h := range held {
		c := cand{st: RouteStatus{Neighbor: h.neighbor, Family: familyName(h.route.Family), NLRI: h.key, Actions: h.actions, Stale: h.stale}, r: h.route}
		ck := c.st.Family + " " + h.key + " " + h.actions
		ct, ok := a.trCache[ck]
		if !ok {
			ct.tr, ct.err = Translate(h.route, TranslateOptions{MaxRules: a.cfg.BGP.MaxRulesPerRoute, SampleOneIn: a.cfg.BGP.SampleOneIn})
		}
		cache[ck] = ct
		tr, err := ct.tr, ct.err
		if err != nil {
			c.st.State, c.st.Reason = RouteRefused, strings.TrimPrefix(err.Error(), ErrRefused.Error()+": ")
		} else {
			c.st.State, c.tr = RouteAccepted, tr
		}
		cands = append(cands, c)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].r.Family != cands[j].r.Family {
			return cands[i].r.Family < cands[j].r.Family // families never match the same frame
		}
		if c := comparePrecedence(cands[i].r, cands[j].r); c != 0 {
			return c < 0
		}
		return cands[i].st.Neighbor < cands[j].st.Neighbor
	})
	a.trCache = cache
	// The routes in order while max_rules allows, then the destination
	// table takes what it may (dstplace.go), then the compound rules left
	// must fit beside the files' (refusing a route that has compound
	// rules never changes what the table may take: it only removes a
	// rule judged before it).
	type taken struct {
		c     cand
		rules []fastdrop.Rule
	}
	var take []taken
	total := 0
	seen := map[string]bool{} // an NLRI from two neighbours: the first in order wins
	out := make([]RouteStatus, 0, len(cands))
	at := make([]int, len(cands)) // cands index -> take index, -1
	for k, c := range cands {
		at[k] = -1
		st := &cands[k].st
		if st.State != RouteAccepted {
			continue
		}
		key := st.Family + " " + st.NLRI
		switch {
		case seen[key]:
			st.State, st.Reason = RouteShadowed, "the same route from another neighbour is in force"
		case total+len(c.tr.Rules) > a.cfg.BGP.MaxRules:
			st.State, st.Reason = RouteRefused, fmt.Sprintf("no room: %d rules from BGP at most (bgp max_rules)", a.cfg.BGP.MaxRules)
		default:
			seen[key] = true
			total += len(c.tr.Rules)
			at[k] = len(take)
			take = append(take, taken{c: c, rules: slices.Clone(c.tr.Rules)})
		}
	}
	var flat []fastdrop.Rule
	for _, t := range take {
		flat = append(flat, t.rules...)
	}
	if len(flat) > 0 {
		if blockers, ok := a.dstBlockers(); ok {
			placeDst(flat, blockers)
		}
	}
	room := fastdrop.MaxCompoundRules - fileCompound
	compound := 0
	var rules []fastdrop.Rule
	var owner []int
	off := 0
	for k, c := range cands {
		st := c.st
		if t := at[k]; t >= 0 {
			rs := flat[off : off+len(take[t].rules)]
			off += len(take[t].rules)
			n := 0
			for i := range rs {
				if !rs[i].IsPrefixOnly() {
					n++
				}
			}
			if compound+n > room {
				st.State, st.Reason = RouteRefused, fmt.Sprintf("no room: %d compound rules from BGP at most (%d compound rules in all, %d of them from files; only routes of a destination prefix alone may be prefix rules)", room, fastdrop.MaxCompoundRules, fileCompound)
			} else {
				compound += n
				rules = append(rules, rs...)
				for range rs {
					owner = append(owner, len(out))
				}
				for i := range rs {
					st.Rules = append(st.Rules, rs[i].String())
				}
				if len(rs) == 0 {
					st.Reason = "no filtering action and the terminal-action bit set: nothing to do"
				}
			}
		}
		out = append(out, st)
	}
	return out, rules, owner
}

// dstBlockers returns the rules of the other origins on the interfaces
// FlowSpec rules go to that bear on which FlowSpec rules may go to the
// destination prefix table (fastdrop.Engine.DstBlockers), all of them
// together (what blocks on one interface blocks on all: a rule kept
// compound is never wrong). ok is false when they could not be read:
// then every rule stays compound.
func (a *Agent) dstBlockers() (_ []fastdrop.Rule, ok bool) {
	rd, can := a.plane.(dstBlockerReader)
	if !can {
		return nil, true
	}
	var all []fastdrop.Rule
	for _, ic := range a.cfg.Interfaces {
		if !a.cfg.appliesFlowSpec(ic.Name) {
			continue
		}
		b, err := rd.dstBlockers(ic, OriginFlowSpec)
		if err != nil {
			a.log.Warn("the rules of other origins could not be read: FlowSpec rules stay compound rules", "interface", ic.Name, "error", err)
			return nil, false
		}
		all = append(all, b...)
	}
	return all, true
}

// dstBlockerReader is a dataplane that can list the rules of the other
// origins that bear on the destination prefix table (nil, nil: none, or
// nothing attached).
type dstBlockerReader interface {
	dstBlockers(ic InterfaceConfig, origin string) ([]fastdrop.Rule, error)
}

// logRouteChanges logs each route whose state changed since the last pass.
func (a *Agent) logRouteChanges(now []RouteStatus) {
	a.mu.Lock()
	before := map[string]RouteStatus{}
	for _, r := range a.routes {
		before[r.Neighbor+" "+r.Family+" "+r.NLRI] = r
	}
	a.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range now {
		k := r.Neighbor + " " + r.Family + " " + r.NLRI
		seen[k] = true
		if b, ok := before[k]; ok && b.State == r.State && b.Stale == r.Stale && b.Reason == r.Reason {
			continue
		}
		switch r.State {
		case RouteRefused:
			a.log.Warn("flowspec route refused", "neighbor", r.Neighbor, "route", r.NLRI, "actions", r.Actions, "reason", r.Reason)
		default:
			a.log.Info("flowspec route "+r.State, "neighbor", r.Neighbor, "route", r.NLRI, "actions", r.Actions, "rules", len(r.Rules), "stale", r.Stale)
		}
	}
	for k, r := range before {
		if !seen[k] {
			a.log.Info("flowspec route removed", "neighbor", r.Neighbor, "route", r.NLRI)
		}
	}
}

func familyName(f int) string {
	if f == 6 {
		return FamilyIPv6FlowSpec
	}
	return FamilyIPv4FlowSpec
}

// writeStatusFile writes the status JSON where the config says, replacing
// the file atomically.
func (a *Agent) writeStatusFile() {
	if a.cfg.Status.File == "" {
		return
	}
	b, err := a.statusJSON()
	if err == nil {
		tmp := a.cfg.Status.File + ".tmp"
		if err = os.WriteFile(tmp, b, 0o644); err == nil {
			err = os.Rename(tmp, a.cfg.Status.File)
		}
	}
	if err != nil {
		a.log.Warn("status file not written", "file", a.cfg.Status.File, "error", err)
	}
}

// CheckResult is what Check found, per interface.
type CheckResult struct {
	Interface string `json:"interface"`
	Rules     int    `json:"rules"`
	Compound  int    `json:"compound_rules"`
	Prefixes  int    `json:"prefix_rules"`
	Policy    string `json:"policy"`
	FlowSpec  bool   `json:"flowspec"` // FlowSpec rules go here
}

// Check reads every rule file of cfg and checks each interface's rules as
// a whole, touching nothing: what `xdpdrop agent --check` does.
func Check(cfg *Config) ([]CheckResult, error) {
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), plane: nopPlane{}})
	if err != nil {
		return nil, err
	}
	a.readFiles("check")
	var errs []error
	for _, fs := range a.files {
		if fs.err != nil {
			errs = append(errs, fs.err)
		}
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, errors.Join(errs...)
	}
	var out []CheckResult
	for _, ic := range cfg.Interfaces {
		rs, err := a.ruleSetFor(ic)
		if err != nil {
			return nil, err
		}
		r := CheckResult{Interface: ic.Name, Rules: len(rs.Rules), Policy: rs.EffectivePolicy().String(), FlowSpec: cfg.appliesFlowSpec(ic.Name)}
		for i := range rs.Rules {
			if rs.Rules[i].IsPrefixOnly() {
				r.Prefixes++
			} else {
				r.Compound++
			}
		}
		out = append(out, r)
	}
	return out, nil
}

type nopPlane struct{}

func (nopPlane) apply(InterfaceConfig, string, *fastdrop.RuleSet) (applied, error) {
	return applied{}, nil
}
