package tc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// SettableKeys are the port settings Set changes on a running lab.
var SettableKeys = []string{
	"rate", "buffer",
	"marking.ecn.threshold",
	"marking.phantom.drain", "marking.phantom.threshold",
}

// Set retunes one setting of a running port without touching its links:
// marker parameters are rewritten in the lab's BPF map (the programs read
// them on the next packet), rate and buffer are changed in place on the
// HTB classes and fifos. A bad key or value is a FieldError on key.
func Set(ctx context.Context, t Target, key, value string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	value = strings.TrimSpace(value)
	switch key {
	case "rate":
		r, err := units.ParseRate(value)
		if err != nil {
			return yamlfile.Field(key, "%v", err)
		}
		return setRate(t, r)
	case "buffer":
		b, err := ParseBuffer(value)
		if err != nil {
			return yamlfile.Field(key, "%v", err)
		}
		return setBuffer(t, b)
	case "marking.ecn.threshold":
		k, err := positiveSize(key, value)
		if err != nil {
			return err
		}
		return updateMarker(t, markECN, key, func(c *portPortCfg) error {
			if c.CapBytes[0] != 0 && uint64(k) > uint64(c.CapBytes[0]) {
				return yamlfile.Field(key, "%s is larger than the port's buffer (%d bytes)", k, c.CapBytes[0])
			}
			c.Threshold = uint32(k)
			return nil
		})
	case "marking.phantom.threshold":
		k, err := positiveSize(key, value)
		if err != nil {
			return err
		}
		return updateMarker(t, markPhantom, key, func(c *portPortCfg) error {
			c.Threshold = uint32(k)
			return nil
		})
	case "marking.phantom.drain":
		d, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return yamlfile.Field(key, "want a number such as 0.95, got %q", value)
		}
		if err := checkDrain(d); err != nil {
			return yamlfile.In(key, err)
		}
		rate, err := portRate(t)
		if err != nil {
			return err
		}
		return updateMarker(t, markPhantom, key, func(c *portPortCfg) error {
			c.DrainBps = uint64(rate.BytesPerSecond() * d)
			return nil
		})
	}
	return yamlfile.Field(key, "cannot be set on a running port; settable: %s", strings.Join(SettableKeys, ", "))
}

func positiveSize(key, value string) (units.Size, error) {
	k, err := units.ParseSize(value)
	if err != nil {
		return 0, yamlfile.Field(key, "%v", err)
	}
	if k == 0 || k > 1<<32-1 {
		return 0, yamlfile.Field(key, "must be between 1 byte and 4 GB, got %s", value)
	}
	return k, nil
}

// updateMarker rewrites the marker parameters of one hook. The map value is
// replaced as a whole, so a program sees either the old or the new
// parameters, never a mix; the virtual queue itself carries on.
func updateMarker(t Target, marker uint32, key string, change func(*portPortCfg) error) error {
	c, link, err := openPort(t)
	if err != nil {
		return err
	}
	defer c.Close()
	maps, err := openLabMaps(t.Lab)
	if err != nil {
		return yamlfile.Field(key, "port %s has no marker: %v", t, err)
	}
	defer maps.close(t.Lab)
	k, err := portKey(c, link.Attrs().Index, dirEgress)
	if err != nil {
		return err
	}
	var cfg portPortCfg
	if err := maps.cfg.Lookup(&k, &cfg); err != nil || cfg.Marker != marker {
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		section, _, _ := strings.Cut(strings.TrimPrefix(key, "marking."), ".")
		return yamlfile.Field(key, "port %s was built without marking.%s; markers are chosen when the lab is created", t, section)
	}
	if err := change(&cfg); err != nil {
		return err
	}
	return maps.cfg.Update(&k, &cfg, ebpf.UpdateExist)
}

// portRate reads the port's rate from its HTB tree (the class that carries
// the whole port, 1:1).
func portRate(t Target) (units.Rate, error) {
	c, link, err := openPort(t)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	classes, err := htbClasses(c, link)
	if err != nil {
		return 0, err
	}
	return classes.portRate(), nil
}

type htbTree []*netlink.HtbClass

func htbClasses(c *nsConn, link netlink.Link) (htbTree, error) {
	list, err := c.h.ClassList(link, 0)
	if err != nil {
		return nil, err
	}
	var out htbTree
	for _, cl := range list {
		if h, ok := cl.(*netlink.HtbClass); ok {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no fabric port (no HTB classes)", link.Attrs().Name)
	}
	return out, nil
}

// portRate is the ceiling every class shares: the port rate (bytes/s in
// the dump).
func (tr htbTree) portRate() units.Rate { return units.Rate(tr[0].Ceil * 8) }

func setRate(t Target, r units.Rate) error {
	c, link, err := openPort(t)
	if err != nil {
		return err
	}
	defer c.Close()
	tree, err := htbClasses(c, link)
	if err != nil {
		return err
	}
	old := tree.portRate()
	scale := float64(r) / float64(old)
	p := Port{MTU: link.Attrs().MTU, Rate: r}
	for _, cl := range tree {
		a := cl.Attrs()
		// Guaranteed rates scale with the port; priorities and quanta (the
		// weights, NDP's ratio) stay. A flow bucket keeps its token rate.
		share := classShare{rate: max(uint64(float64(cl.Rate*8)*scale), 8000), prio: cl.Prio, quantum: cl.Quantum}
		if _, bucket, _ := classBand(uint16(a.Handle)); bucket >= 0 {
			share = classShare{rate: cl.Rate * 8, prio: cl.Prio, quantum: cl.Quantum, burst: uint32(p.MTU + frameOverhead)}
		}
		nc := p.htbClass(a.LinkIndex, a.Parent, a.Handle, share)
		if err := c.h.ClassChange(nc); err != nil {
			return fmt.Errorf("port %s: rate of class %x: %w", t, a.Handle, err)
		}
	}
	// The markers drain in proportion to the port rate.
	maps, err := openLabMaps(t.Lab)
	if err != nil {
		return nil // plain port: nothing else to change
	}
	defer maps.close(t.Lab)
	rescale := func(cc *nsConn, ifindex int, dir uint32) error {
		k, err := portKey(cc, ifindex, dir)
		if err != nil {
			return err
		}
		var cfg portPortCfg
		if err := maps.cfg.Lookup(&k, &cfg); err != nil {
			return nil
		}
		cfg.DrainBps = uint64(float64(cfg.DrainBps) * scale)
		cfg.WireBps = uint64(float64(cfg.WireBps) * scale)
		return maps.cfg.Update(&k, &cfg, ebpf.UpdateExist)
	}
	return rescale(c, link.Attrs().Index, dirEgress)
}

func setBuffer(t Target, b Buffer) error {
	c, link, err := openPort(t)
	if err != nil {
		return err
	}
	defer c.Close()
	mtu := link.Attrs().MTU
	if b.BytesAt(mtu) < units.Size(mtu+frameOverhead) {
		return yamlfile.Field("buffer", "%s cannot hold one full-size frame", b)
	}
	maps, err := openLabMaps(t.Lab)
	if err != nil {
		maps = nil // no programs in this lab: no marker, no NDP, no buckets
	} else {
		defer maps.close(t.Lab)
	}
	var cfg portPortCfg
	k, err := portKey(c, link.Attrs().Index, dirEgress)
	if err != nil {
		return err
	}
	if maps != nil && maps.cfg.Lookup(&k, &cfg) == nil && cfg.Marker == markNDP {
		return yamlfile.Field("buffer", "port %s is an NDP port: its queues are ndp.data and ndp.header, set when the lab is created", t)
	}
	if err := c.replaceLeafLimits(t, link, b); err != nil {
		return err
	}
	// The ECN marker predicts drops with the buffer.
	if maps == nil || cfg.Marker != markECN || cfg.DropsSeen != 0 {
		return nil
	}
	capBytes := Port{MTU: mtu, Buffer: b}.markerCap()
	for band := range cfg.CapBytes {
		if cfg.CapBytes[band] != 0 {
			cfg.CapBytes[band] = capBytes
		}
	}
	return maps.cfg.Update(&k, &cfg, ebpf.UpdateExist)
}

// replaceLeafLimits gives every fifo of the port's tree the buffer b: a
// band's fifo all of it, a flow bucket its share (b over the band's
// buckets).
func (c *nsConn) replaceLeafLimits(t Target, link netlink.Link, b Buffer) error {
	qs, err := c.h.QdiscList(link)
	if err != nil {
		return err
	}
	buckets := map[int]int{} // band → its flow buckets
	for _, q := range qs {
		if band, bucket, ok := classBand(uint16(q.Attrs().Parent)); ok && q.Attrs().Parent>>16 == rootMajor && bucket >= 0 {
			buckets[band]++
		}
	}
	mtu := link.Attrs().MTU
	for _, n := range buckets {
		if err := (Port{MTU: mtu, Buffer: b, Buckets: n}).checkBucketBuffer(); err != nil {
			return yamlfile.Field("buffer", "%s split over %d flow buckets leaves each less than one full-size frame (%d bytes)", b, n, mtu+frameOverhead)
		}
	}
	n := 0
	for _, q := range qs {
		a := q.Attrs()
		band, bucket, ok := classBand(uint16(a.Parent))
		if a.Parent>>16 != rootMajor || !ok {
			continue
		}
		limit := b
		if bucket >= 0 {
			limit = Port{Buffer: b, Buckets: buckets[band]}.bucketBuffer()
		}
		if err := c.replaceFifo(fifoFor(a.LinkIndex, a.Handle, a.Parent, limit)); err != nil {
			return fmt.Errorf("port %s: %w", t, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("port %s: no fabric fifo found", t)
	}
	return nil
}
