package pcapng

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Writer writes one little-endian section. It buffers: call Flush to
// hand what was written to the underlying writer (a pipe's reader sees
// packets only then). Not safe for concurrent use.
type Writer struct {
	w      *bufio.Writer
	buf    []byte
	ifaces []Interface
}

// WriterOptions describe the section.
type WriterOptions struct {
	// App is the shb_userappl option, e.g. "xdpdrop 1.2".
	App string
}

var le = binary.LittleEndian

// NewWriter writes a section header block to w and returns a Writer for
// the section.
func NewWriter(w io.Writer, opts WriterOptions) (*Writer, error) {
	pw := &Writer{w: bufio.NewWriterSize(w, 64<<10)}
	b := pw.begin(blockSHB)
	b = le.AppendUint32(b, byteOrderMagic)
	b = le.AppendUint16(b, 1)          // major
	b = le.AppendUint16(b, 0)          // minor
	b = le.AppendUint64(b, ^uint64(0)) // section length: not given
	if opts.App != "" {
		b = appendOpt(b, shbUserAppl, []byte(opts.App))
	}
	b = appendEnd(b)
	if err := pw.end(b); err != nil {
		return nil, err
	}
	return pw, nil
}

// AddInterface writes an interface description block and returns the
// interface's index for Packet.Interface. TsResol 0 means 9
// (nanoseconds); only 6 and 9 are written.
func (w *Writer) AddInterface(ifc Interface) (int, error) {
	if ifc.TsResol == 0 {
		ifc.TsResol = 9
	}
	if ifc.TsResol != 6 && ifc.TsResol != 9 {
		return 0, fmt.Errorf("pcapng: timestamp resolution 10^-%d: want 6 or 9", ifc.TsResol)
	}
	b := w.begin(blockIDB)
	b = le.AppendUint16(b, ifc.LinkType)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, ifc.Snaplen)
	if ifc.Name != "" {
		b = appendOpt(b, ifName, []byte(ifc.Name))
	}
	b = appendOpt(b, ifTsresol, []byte{ifc.TsResol})
	b = appendEnd(b)
	if err := w.end(b); err != nil {
		return 0, err
	}
	w.ifaces = append(w.ifaces, ifc)
	return len(w.ifaces) - 1, nil
}

// ErrNoInterface: a packet names an interface the section has not
// described.
var ErrNoInterface = errors.New("pcapng: packet of an undescribed interface")

// WritePacket writes an enhanced packet block. Data longer than the
// interface's snap length is cut to it.
func (w *Writer) WritePacket(p Packet) error {
	if p.Interface < 0 || p.Interface >= len(w.ifaces) {
		return ErrNoInterface
	}
	ifc := w.ifaces[p.Interface]
	data := p.Data
	if ifc.Snaplen != 0 && len(data) > int(ifc.Snaplen) {
		data = data[:ifc.Snaplen]
	}
	length := max(p.Length, len(p.Data))
	var ts uint64
	if ifc.TsResol == 6 {
		ts = uint64(p.Time.UnixMicro())
	} else {
		ts = uint64(p.Time.UnixNano())
	}
	b := w.begin(blockEPB)
	b = le.AppendUint32(b, uint32(p.Interface))
	b = le.AppendUint32(b, uint32(ts>>32))
	b = le.AppendUint32(b, uint32(ts))
	b = le.AppendUint32(b, uint32(len(data)))
	b = le.AppendUint32(b, uint32(length))
	b = append(b, data...)
	b = append(b, make([]byte, pad4(len(data))-len(data))...)
	for _, c := range p.Comments {
		b = appendOpt(b, optComment, []byte(c))
	}
	if p.HasQueue {
		b = appendOpt(b, epbQueue, le.AppendUint32(nil, p.Queue))
	}
	for _, v := range p.Verdicts {
		b = appendOpt(b, epbVerdict, v)
	}
	if len(p.Comments) > 0 || p.HasQueue || len(p.Verdicts) > 0 {
		b = appendEnd(b)
	}
	return w.end(b)
}

// Flush writes what is buffered to the underlying writer.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("pcapng: %w", err)
	}
	return nil
}

// begin starts a block in w.buf: type and a length filled in by end.
func (w *Writer) begin(typ uint32) []byte {
	b := w.buf[:0]
	b = le.AppendUint32(b, typ)
	return le.AppendUint32(b, 0)
}

// end fills in the block's length, repeats it at the end and writes the
// block.
func (w *Writer) end(b []byte) error {
	n := uint32(len(b) + 4)
	le.PutUint32(b[4:8], n)
	b = le.AppendUint32(b, n)
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("pcapng: %w", err)
	}
	return nil
}

func appendOpt(b []byte, code uint16, v []byte) []byte {
	b = le.AppendUint16(b, code)
	b = le.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, pad4(len(v))-len(v))...)
}

func appendEnd(b []byte) []byte { return le.AppendUint32(b, 0) }
