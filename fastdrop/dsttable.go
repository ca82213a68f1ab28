package fastdrop

import (
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xdpdrop/xdpdrop/gen"
)

// dstTables is the destination prefix table, which holds the prefix rules
// "ACTION dst PREFIX" (Options.DstPrefixes): the source table's
// structures, a DIR-24-8 v4Table on maps of its own (fd_d4_tbl24,
// fd_d4_tbl8, fd_d4_sparse) and a v6Table in entries 2 and 3 of
// fd_v6_tab (whose search, fd_v6_lookup, reads its parameters from
// fd_half.dconf), kept the same way: mirrors in Go, halves in the kernel.
// The program looks it up before the source table, on its full path only
// (FD_FEAT_DST), so a rule set without destination prefix rules costs
// frames nothing. Its methods do nothing on a nil table (a program
// loaded without one), but refuse rules that need it.
type dstTables struct {
	groups, sparse, v6cap int
	mem                   struct{ tbl24, tbl8, sparse *mapMem }
	v6mem                 *mapMem // fd_v6_tab's (the engine's: not released here)
	v4                    *v4Table
	v6                    *v6Table
	v6dirty               bool // v6 was rebuilt: write it whole
}

// errNoDstTable is what a rule set with destination prefix rules gets
// from a program loaded without the table.
func errNoDstTable(n int) error {
	return fmt.Errorf("%d destination prefix rules (\"ACTION dst PREFIX\"): %w: the program was loaded without a destination prefix table; %s", n, ErrCapacity, reloadAdvice)
}

// sizeDst sizes the destination table's maps for o: a tbl24 of one entry
// and pools of one group without o.DstPrefixes.
func sizeDst(spec *ebpf.CollectionSpec, o Options) error {
	d24, mask, groups, hosts := uint32(4), uint32(0), 1, 1
	if o.DstPrefixes {
		d24, mask = tbl24Entries*4, tbl24Entries-1
		groups, hosts = o.DstIPv4Blocks, o.DstIPv4HostBlocks
		// The IPv6 halves after the source table's.
		spec.Maps[gen.FastdropMapFdV6Tab].MaxEntries = 4
	}
	spec.Maps[gen.FastdropMapFdD4Tbl24].ValueSize = d24
	spec.Maps[gen.FastdropMapFdD4Tbl8].MaxEntries = uint32(2 * groups)
	spec.Maps[gen.FastdropMapFdD4Sparse].MaxEntries = uint32(2 * hosts)
	if err := spec.Variables[gen.FastdropVarFdD4Mask].Set(mask); err != nil {
		return fmt.Errorf("fastdrop: set %s: %w", gen.FastdropVarFdD4Mask, err)
	}
	return nil
}

// setupDst maps the destination table's memory, if the program has one
// (its tbl24 has a value per half of tbl24Entries entries).
func (e *Engine) setupDst() error {
	e.dst = nil
	t24 := e.maps[gen.FastdropMapFdD4Tbl24]
	if t24 == nil || t24.ValueSize() != tbl24Entries*4 {
		return nil
	}
	if n := e.maps[gen.FastdropMapFdV6Tab].MaxEntries(); n < 4 {
		return fmt.Errorf("map %s has %d entries, not the 4 of a program with a destination prefix table", gen.FastdropMapFdV6Tab, n)
	}
	d := &dstTables{
		groups: int(e.maps[gen.FastdropMapFdD4Tbl8].MaxEntries()),
		sparse: int(e.maps[gen.FastdropMapFdD4Sparse].MaxEntries()),
		v6cap:  e.v6cap,
		v6mem:  e.mem.v6,
	}
	for _, m := range []struct {
		name string
		mem  **mapMem
	}{
		{gen.FastdropMapFdD4Tbl24, &d.mem.tbl24},
		{gen.FastdropMapFdD4Tbl8, &d.mem.tbl8},
		{gen.FastdropMapFdD4Sparse, &d.mem.sparse},
	} {
		mm, err := newMapMem(e.maps[m.name], 0, 1<<20, 4)
		if err != nil {
			return errors.Join(err, d.release())
		}
		*m.mem = mm
	}
	e.dst = d
	return nil
}

// reset makes empty mirrors.
func (d *dstTables) reset(slots int) error {
	if d == nil {
		return nil
	}
	if err := d.close(); err != nil {
		return err
	}
	var err error
	if d.v4, err = newV4Table(d.groups, d.sparse, slots, d.mem.tbl8, d.mem.sparse); err != nil {
		return err
	}
	d.v6, err = newV6Table(d.v6cap)
	return err
}

// close releases the mirrors.
func (d *dstTables) close() error {
	if d == nil {
		return nil
	}
	var errs []error
	if d.v4 != nil {
		errs = append(errs, d.v4.close())
		d.v4 = nil
	}
	if d.v6 != nil {
		errs = append(errs, d.v6.close())
		d.v6 = nil
	}
	return errors.Join(errs...)
}

// release unmaps the maps' memory.
func (d *dstTables) release() error {
	if d == nil {
		return nil
	}
	var errs []error
	for _, m := range []*mapMem{d.mem.tbl24, d.mem.tbl8, d.mem.sparse} {
		if m != nil {
			errs = append(errs, m.release())
		}
	}
	return errors.Join(errs...)
}

// reload makes the mirrors hold v4 and v6, which the active half holds
// (compileAll).
func (d *dstTables) reload(active uint32, v4 []v4Prefix, v6 []v6Prefix) error {
	if d == nil {
		if n := len(v4) + len(v6); n > 0 {
			return errNoDstTable(n)
		}
		return nil
	}
	half24 := io.NewSectionReader(d.mem.tbl24, int64(active)*tbl24Entries*4, tbl24Entries*4)
	if err := d.v4.reload(half24, v4); err != nil {
		return err
	}
	if err := d.v6.build(v6); err != nil {
		return err
	}
	d.v6dirty = true
	return nil
}

// fits reports (wrapping ErrCapacity) n destination prefix rules, with
// the IPv4 prefixes longer than /24 in dense and sparse /24s and v6 IPv6
// ones, that the table cannot hold.
func (d *dstTables) fits(n, dense, sparse, v6 int) error {
	if n == 0 {
		return nil
	}
	if d == nil {
		return errNoDstTable(n)
	}
	if dense > d.groups/2 {
		return fmt.Errorf("destination IPv4 prefixes longer than /24 in %d different /24s: %w: the program was loaded with room for them in %d /24s; %s", dense, ErrCapacity, d.groups/2, reloadAdvice)
	}
	if sparse > d.sparse/2 {
		return fmt.Errorf("destination IPv4 host routes in %d different /24s: %w: the program was loaded with room for them in %d /24s; %s", sparse, ErrCapacity, d.sparse/2, reloadAdvice)
	}
	if v6 > d.v6cap/4*3 {
		return fmt.Errorf("%d destination IPv6 prefixes: %w: the program was loaded with a destination IPv6 table of %d entries, room for about %d; %s", v6, ErrCapacity, d.v6cap, d.v6cap/4*3, reloadAdvice)
	}
	return nil
}

func (e *Engine) dstFits(n, dense, sparse, v6 int) error { return e.dst.fits(n, dense, sparse, v6) }

// changeDst updates the destination table's mirrors from the rule set in
// force to the plan's, as compileChange does the source table's.
func (e *Engine) changeDst(p *plan) error {
	d := e.dst
	var add, del []v4Prefix
	v6changed, added := false, 0
	for _, i := range p.added {
		if r := &p.rules[i]; r.IsPrefixOnly() && r.Dst.IsValid() {
			added++
			if r.Dst.Addr().Is4() {
				add = append(add, v4PrefixOf(r.Dst, mkVal(r.Action, p.slots[i])))
			} else {
				v6changed = true
			}
		}
	}
	for _, i := range p.removed {
		if r := &e.rules[i]; r.IsPrefixOnly() && r.Dst.IsValid() {
			if r.Dst.Addr().Is4() {
				del = append(del, v4PrefixOf(r.Dst, mkVal(r.Action, e.slots[i])))
			} else {
				v6changed = true
			}
		}
	}
	if d == nil {
		if added > 0 {
			return errNoDstTable(added)
		}
		return nil
	}
	err := d.v4.change(add, del, e.fullWrite, d.groups, d.sparse, "destination IPv4", func() []v4Prefix { return p.v4Prefixes(true) })
	if err != nil {
		return err
	}
	if v6changed {
		if err := d.v6.build(p.v6Prefixes(true)); err != nil {
			return err
		}
		d.v6dirty = true
	}
	return nil
}

// flush writes the tbl8 and sparse groups made by this change.
func (d *dstTables) flush() error {
	if d == nil {
		return nil
	}
	return d.v4.flush()
}

// committed frees the groups the change replaced.
func (d *dstTables) committed() {
	if d == nil {
		return
	}
	d.v4.committed()
	d.v6dirty = false
}

// writeHalf copies what changed in the mirrors into half h (all of the
// IPv6 table with full).
func (d *dstTables) writeHalf(h uint32, full bool) error {
	if d == nil {
		return nil
	}
	base24 := int64(h) * tbl24Entries * 4
	err := d.v4.forDirty(func(start, end int) error {
		_, err := d.mem.tbl24.WriteAt(u32Bytes(d.v4.tbl24[start:end]), base24+int64(start)*4)
		return err
	})
	if err != nil {
		return fmt.Errorf("write destination IPv4 prefix table: %w", err)
	}
	if d.v6dirty || full {
		if _, err := d.v6mem.WriteAt(d.v6.buf, int64(2+h)*int64(d.v6cap)*int64(v6EntSize)); err != nil {
			return fmt.Errorf("write destination IPv6 prefix table: %w", err)
		}
	}
	return nil
}

// dconf is fd_half.dconf for half h: the IPv6 table's parameters, as
// fd_v6_lookup reads them, with its fd_v6_tab entry; nothing else.
func (d *dstTables) dconf(h uint32) gen.FastdropFdConf {
	return gen.FastdropFdConf{
		V6Count:   uint32(d.v6.count),
		Half:      2 + h,
		V6Mask:    uint32(max(d.v6.size, 1) - 1),
		V6Shift:   d.v6.shift(),
		V6Default: d.v6.def,
		V6Seed:    d.v6.seed,
		V6Tree:    d.v6.tree,
	}
}

// conf fills in fd_conf's destination table members.
func (d *dstTables) conf(c *gen.FastdropFdConf) {
	if d == nil {
		return
	}
	c.D4Count = uint32(d.v4.count)
	c.D6Count = uint32(d.v6.count)
}

// DstBlockers returns the rules in force that may decide a frame
// differently once a compound rule "ACTION dst P" of origin (one without
// any other field) is put in the destination prefix table as "ACTION dst
// P": the compound rules of the origins evaluated after origin but before
// the prefix rules (not late ones), which such a rule would no longer come
// before, and the destination prefix rules of every other origin (a
// longer prefix among them would win over it in the table, the same one
// cannot be added). The rules of origin itself and the rest are left out,
// so a million source prefix rules cost a pass over the rules, not a copy.
func (e *Engine) DstBlockers(origin string) ([]Rule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.refreshLocked(); err != nil {
		return nil, err
	}
	var out []Rule
	for i := range e.rules {
		r := &e.rules[i]
		if r.Origin == origin {
			continue
		}
		if r.IsPrefixOnly() {
			if r.Dst.IsValid() {
				out = append(out, *r)
			}
			continue
		}
		if !isLateOrigin(r.Origin) && compareOrigins(r.Origin, origin) > 0 {
			out = append(out, *r)
		}
	}
	return out, nil
}

// HasDstTable reports whether the program was loaded with a destination
// prefix table (Options.DstPrefixes).
func (e *Engine) HasDstTable() bool { return e.dst != nil }

// tablePrefix is r's prefix in the source table, or with dst in the
// destination table, if r is a prefix rule of that table.
func tablePrefix(r *Rule, dst bool) (netip.Prefix, bool) {
	if !r.IsPrefixOnly() {
		return netip.Prefix{}, false
	}
	if dst {
		return r.Dst, r.Dst.IsValid()
	}
	return r.Src, r.Src.IsValid()
}

// v4Prefixes are the plan's IPv4 prefix rules of the source table, or
// with dst of the destination table, as the table holds them.
func (p *plan) v4Prefixes(dst bool) []v4Prefix {
	all := make([]v4Prefix, 0, p.prefixCap(dst))
	for i := range p.rules {
		if q, ok := tablePrefix(&p.rules[i], dst); ok && q.Addr().Is4() {
			all = append(all, v4PrefixOf(q, mkVal(p.rules[i].Action, p.slots[i])))
		}
	}
	return all
}

// v6Prefixes is v4Prefixes for IPv6.
func (p *plan) v6Prefixes(dst bool) []v6Prefix {
	all := make([]v6Prefix, 0, p.prefixCap(dst))
	for i := range p.rules {
		if q, ok := tablePrefix(&p.rules[i], dst); ok && !q.Addr().Is4() {
			all = append(all, v6PrefixOf(q, mkVal(p.rules[i].Action, p.slots[i])))
		}
	}
	return all
}

// prefixCap is room for the source table's prefixes (most of a big rule
// set: grown by append, a million cost far more) and none ahead for the
// destination table's (a few, beside them).
func (p *plan) prefixCap(dst bool) int {
	if dst {
		return 0
	}
	return len(p.rules)
}
