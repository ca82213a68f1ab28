package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
}

// fileState is a rule file: the rules last read from it without error,
// and the error of the last read, if it failed.
type fileState struct {
	rules  *fastdrop.RuleSet // last good; nil until one read succeeded
	loaded time.Time         // when rules were read
	err    error             // the last read's error; rules stay in force
}

// ifaceState is what is in force on an interface.
type ifaceState struct {
	inForce   bool // a rule set was applied
	mode      string
	fileRules []string
	bgpRules  []string
	policy    string
	err       error // the last apply's error
	applied   time.Time
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
// rules, and the error is logged and kept for status.
func (a *Agent) readFiles(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for path, fs := range a.files {
		rs, err := fastdrop.ParseFile(path)
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
		fs.rules, fs.err, fs.loaded = rs, nil, time.Now()
	}
}

func ruleCount(rs *fastdrop.RuleSet) int {
	if rs == nil {
		return 0
	}
	return len(rs.Rules)
}

// reconcile builds every interface's rule set and applies those that
// changed: file rules first, then the FlowSpec rules in RFC 8955 order.
func (a *Agent) reconcile() {
	var routes []RouteStatus
	var bgpRules []fastdrop.Rule
	var bgpText []string
	if a.bgp != nil {
		a.bgp.expire(time.Now())
		routes, bgpRules = a.flowSpecRules(a.fileCompoundMax())
		for _, r := range bgpRules {
			bgpText = append(bgpText, r.String())
		}
	}
	a.mu.Lock()
	a.routes = routes
	a.mu.Unlock()
	for _, ic := range a.cfg.Interfaces {
		rs, fileText, err := a.ruleSetFor(ic)
		var bgpHere []string
		if err == nil && a.cfg.appliesFlowSpec(ic.Name) {
			rs.Rules = append(rs.Rules, bgpRules...)
			bgpHere = bgpText
			err = rs.Validate()
		}
		a.mu.Lock()
		st := a.ifaces[ic.Name]
		same := st.inForce && st.err == nil && equal(st.fileRules, fileText) && equal(st.bgpRules, bgpHere) && st.policy == policyText(rs)
		a.mu.Unlock()
		if err != nil {
			a.setIfaceErr(ic.Name, err)
			a.log.Error("rules not applied: the rules in force stay in force", "interface", ic.Name, "error", err)
			continue
		}
		if same {
			continue
		}
		t0 := time.Now()
		res, err := a.plane.apply(ic, rs)
		if err != nil {
			a.setIfaceErr(ic.Name, err)
			a.log.Error("rules not applied: the rules in force stay in force", "interface", ic.Name, "error", err)
			continue
		}
		a.mu.Lock()
		st.inForce, st.err, st.applied, st.mode = true, nil, time.Now(), res.Mode
		st.fileRules, st.bgpRules, st.policy = fileText, bgpHere, policyText(rs)
		a.swaps++
		a.mu.Unlock()
		verb := "rules replaced"
		if res.Attached {
			verb = "attached"
		}
		a.log.Info(verb, "interface", ic.Name, "mode", res.Mode, "file_rules", len(fileText), "bgp_rules", len(bgpHere), "reloaded", res.Reloaded, "took", time.Since(t0).Round(time.Microsecond).String())
	}
	a.writeStatusFile()
}

func policyText(rs *fastdrop.RuleSet) string {
	if rs == nil {
		return ""
	}
	return rs.EffectivePolicy().String() + "/" + rs.EffectiveMalformed().String()
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (a *Agent) setIfaceErr(name string, err error) {
	a.mu.Lock()
	a.ifaces[name].err = err
	a.mu.Unlock()
}

// ruleSetFor is the file part of an interface's rule set: the last good
// rules of each file, then the inline rules, with the policies.
func (a *Agent) ruleSetFor(ic InterfaceConfig) (*fastdrop.RuleSet, []string, error) {
	rs := &fastdrop.RuleSet{}
	a.mu.Lock()
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
			return nil, nil, err
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
		return nil, nil, fmt.Errorf("the rules of %s together: %w", ic.Name, err)
	}
	text := make([]string, len(rs.Rules))
	for i := range rs.Rules {
		text[i] = rs.Rules[i].String()
	}
	return rs, text, nil
}

// fileCompoundMax is the largest number of compound file rules of an
// interface FlowSpec rules go to: what is left of the compound table is
// the room for them.
func (a *Agent) fileCompoundMax() int {
	n := 0
	for _, ic := range a.cfg.Interfaces {
		if !a.cfg.appliesFlowSpec(ic.Name) {
			continue
		}
		rs, _, err := a.ruleSetFor(ic)
		if err != nil {
			continue
		}
		c := 0
		for i := range rs.Rules {
			if !rs.Rules[i].IsPrefixOnly() {
				c++
			}
		}
		n = max(n, c)
	}
	return n
}

// flowSpecRules translates the routes the speaker holds, orders them (RFC
// 8955 section 5.1) and takes the rules of as many as there is room for.
func (a *Agent) flowSpecRules(fileCompound int) ([]RouteStatus, []fastdrop.Rule) {
	held := a.bgp.routes()
	type cand struct {
		st RouteStatus
		r  Route
		tr Translation
	}
	var cands []cand
	for _, h := range held {
		c := cand{st: RouteStatus{Neighbor: h.neighbor, Family: familyName(h.route.Family), NLRI: h.key, Actions: h.actions, Stale: h.stale}, r: h.route}
		tr, err := Translate(h.route, TranslateOptions{MaxRules: a.cfg.BGP.MaxRulesPerRoute})
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
	room := min(a.cfg.BGP.MaxRules, fastdrop.MaxCompoundRules-fileCompound)
	var rules []fastdrop.Rule
	seen := map[string]bool{} // an NLRI from two neighbours: the first in order wins
	out := make([]RouteStatus, 0, len(cands))
	for _, c := range cands {
		st := c.st
		if st.State == RouteAccepted {
			key := st.Family + " " + st.NLRI
			switch {
			case seen[key]:
				st.State, st.Reason = RouteShadowed, "the same route from another neighbour is in force"
			case len(rules)+len(c.tr.Rules) > room:
				st.State, st.Reason = RouteRefused, fmt.Sprintf("no room: %d rules from BGP at most (bgp max_rules %d; %d compound rules in all, %d of them from files)", room, a.cfg.BGP.MaxRules, fastdrop.MaxCompoundRules, fileCompound)
			default:
				seen[key] = true
				rules = append(rules, c.tr.Rules...)
				for _, r := range c.tr.Rules {
					st.Rules = append(st.Rules, r.String())
				}
				if len(c.tr.Rules) == 0 {
					st.Reason = "no filtering action and the terminal-action bit set: nothing to do"
				}
			}
		}
		out = append(out, st)
	}
	a.logRouteChanges(out)
	return out, rules
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
		rs, _, err := a.ruleSetFor(ic)
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

func (nopPlane) apply(InterfaceConfig, *fastdrop.RuleSet) (applied, error) { return applied{}, nil }
