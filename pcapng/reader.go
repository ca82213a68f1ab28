package pcapng

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Reader reads the packets of a pcapng file, section after section.
type Reader struct {
	r      *bufio.Reader
	order  binary.ByteOrder
	ifaces []Interface
	buf    []byte
}

// ErrFormat: the input is not pcapng or is damaged.
var ErrFormat = errors.New("pcapng: not a valid pcapng file")

// maxBlock bounds a block's length (a damaged length must not make the
// reader allocate gigabytes).
const maxBlock = 16 << 20

// NewReader reads the first section header from r.
func NewReader(r io.Reader) (*Reader, error) {
	pr := &Reader{r: bufio.NewReaderSize(r, 64<<10)}
	typ, body, err := pr.block()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty", ErrFormat)
		}
		return nil, err
	}
	if typ != blockSHB {
		return nil, fmt.Errorf("%w: does not start with a section header", ErrFormat)
	}
	_ = body
	return pr, nil
}

// Interfaces returns the interfaces the current section has described
// so far.
func (r *Reader) Interfaces() []Interface { return r.ifaces }

// Next returns the next packet; io.EOF at the end. Its Data is valid
// until the next call; its options are its own.
func (r *Reader) Next() (Packet, error) {
	for {
		typ, body, err := r.block()
		if err != nil {
			return Packet{}, err
		}
		switch typ {
		case blockSHB:
			r.ifaces = nil // a new section: interfaces start again
		case blockIDB:
			if len(body) < 8 {
				return Packet{}, fmt.Errorf("%w: short interface block", ErrFormat)
			}
			ifc := Interface{LinkType: r.order.Uint16(body[0:2]), Snaplen: r.order.Uint32(body[4:8]), TsResol: 6}
			err := r.options(body[8:], func(code uint16, v []byte) {
				switch code {
				case ifName:
					ifc.Name = string(v)
				case ifTsresol:
					if len(v) == 1 {
						ifc.TsResol = v[0]
					}
				}
			})
			if err != nil {
				return Packet{}, err
			}
			r.ifaces = append(r.ifaces, ifc)
		case blockEPB:
			return r.epb(body)
		}
		// Other blocks (statistics, name resolution, custom) are skipped.
	}
}

func (r *Reader) epb(body []byte) (Packet, error) {
	if len(body) < 20 {
		return Packet{}, fmt.Errorf("%w: short packet block", ErrFormat)
	}
	o := r.order
	id := int(o.Uint32(body[0:4]))
	if id >= len(r.ifaces) {
		return Packet{}, fmt.Errorf("%w: packet of interface %d, which the section does not describe", ErrFormat, id)
	}
	ts := uint64(o.Uint32(body[4:8]))<<32 | uint64(o.Uint32(body[8:12]))
	caplen := int(o.Uint32(body[12:16]))
	p := Packet{Interface: id, Length: int(o.Uint32(body[16:20]))}
	if caplen > len(body)-20 {
		return Packet{}, fmt.Errorf("%w: packet longer than its block", ErrFormat)
	}
	p.Data = body[20 : 20+caplen]
	p.Time = tsTime(ts, r.ifaces[id].TsResol)
	err := r.options(body[20+pad4(caplen):], func(code uint16, v []byte) {
		switch code {
		case optComment:
			p.Comments = append(p.Comments, string(v))
		case epbQueue:
			if len(v) == 4 {
				p.Queue, p.HasQueue = o.Uint32(v), true
			}
		case epbVerdict:
			p.Verdicts = append(p.Verdicts, append([]byte(nil), v...))
		}
	})
	return p, err
}

// tsTime converts a timestamp in units of the if_tsresol res.
func tsTime(ts uint64, res uint8) time.Time {
	if res&0x80 != 0 { // a power of two
		exp := res & 0x7f
		sec := ts >> exp
		frac := ts & (1<<exp - 1)
		return time.Unix(int64(sec), int64(float64(frac)/math.Ldexp(1, int(exp))*1e9))
	}
	div := uint64(1)
	for range res {
		div *= 10
	}
	sec, frac := ts/div, ts%div
	nsec := frac
	switch {
	case res < 9:
		for range 9 - int(res) {
			nsec *= 10
		}
	case res > 9:
		for range int(res) - 9 {
			nsec /= 10
		}
	}
	return time.Unix(int64(sec), int64(nsec))
}

// options calls fn for each option in b.
func (r *Reader) options(b []byte, fn func(code uint16, v []byte)) error {
	for len(b) >= 4 {
		code, n := r.order.Uint16(b[0:2]), int(r.order.Uint16(b[2:4]))
		if code == optEnd {
			return nil
		}
		if 4+n > len(b) {
			return fmt.Errorf("%w: option longer than its block", ErrFormat)
		}
		fn(code, b[4:4+n])
		b = b[min(len(b), 4+pad4(n)):]
	}
	return nil
}

// block reads one block and returns its type and body (without type,
// lengths). A section header sets the byte order.
func (r *Reader) block() (uint32, []byte, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r.r, hdr[:8]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("%w: cut short", ErrFormat)
		}
		return 0, nil, err
	}
	if binary.LittleEndian.Uint32(hdr[0:4]) == blockSHB {
		if _, err := io.ReadFull(r.r, hdr[8:12]); err != nil {
			return 0, nil, fmt.Errorf("%w: cut short", ErrFormat)
		}
		switch {
		case binary.LittleEndian.Uint32(hdr[8:12]) == byteOrderMagic:
			r.order = binary.LittleEndian
		case binary.BigEndian.Uint32(hdr[8:12]) == byteOrderMagic:
			r.order = binary.BigEndian
		default:
			return 0, nil, fmt.Errorf("%w: bad byte-order magic", ErrFormat)
		}
	} else if r.order == nil {
		return 0, nil, fmt.Errorf("%w: does not start with a section header", ErrFormat)
	}
	typ := r.order.Uint32(hdr[0:4])
	n := int(r.order.Uint32(hdr[4:8]))
	got := 8
	if typ == blockSHB {
		got = 12
	}
	if n < 12 || n%4 != 0 || n > maxBlock || n < got+4 {
		return 0, nil, fmt.Errorf("%w: block length %d", ErrFormat, n)
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	copy(b, hdr[:got])
	if _, err := io.ReadFull(r.r, b[got:]); err != nil {
		return 0, nil, fmt.Errorf("%w: cut short", ErrFormat)
	}
	if int(r.order.Uint32(b[n-4:])) != n {
		return 0, nil, fmt.Errorf("%w: block lengths differ", ErrFormat)
	}
	if typ == blockSHB {
		return typ, b[12 : n-4], nil
	}
	return typ, b[8 : n-4], nil
}
