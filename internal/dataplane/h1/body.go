package h1

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"sync"
)

// Bounds of the chunked framing. A chunk-size line (size and extensions)
// longer than maxChunkLine is refused; so is a body whose framing bytes
// outweigh its data by more than maxChunkOverhead, a client sending one
// byte per chunk with long extensions to keep the server busy parsing.
const (
	maxChunkLine     = 4096
	maxChunkOverhead = 16 << 10
)

var (
	errChunkLine     = errors.New("malformed chunk-size line")
	errChunkLong     = errors.New("chunk-size line too long")
	errChunkOverhead = errors.New("chunked body with too much framing")
	errChunkEnd      = errors.New("chunk data not followed by CRLF")
	errTrailer       = errors.New("malformed trailer")
	errTrailerLarge  = errors.New("trailer too large")
)

// body is a request body read from the connection. It is safe to use from
// another goroutine than the handler's (a transport sending it upstream);
// once the request is finished it is closed, and reads after that fail
// instead of reading the next request from the connection.
type body struct {
	mu     sync.Mutex
	br     *bufio.Reader
	remain int64 // bytes left: of the body (length) or of the chunk
	// chunked: remain is of the current chunk; first is set before the
	// first chunk-size line.
	chunked, first bool
	excess         int64
	done           bool // the whole body was read
	closed         bool
	err            error // sticky framing or read error
	// trailer receives the fields after the last chunk; maxTrailer
	// bounds their bytes.
	trailer    *http.Header
	maxTrailer int
	// beforeRead, when set, runs before the first read: it sends 100
	// (Continue) to a client that waits for it.
	beforeRead func()
	// onDone, when set, runs once the whole body was read.
	onDone func()
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	if f := b.beforeRead; f != nil {
		b.beforeRead = nil
		f()
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var err error
	if b.chunked {
		n, err = b.readChunked(p)
	} else {
		n, err = b.readLength(p)
	}
	if err == io.EOF {
		b.done = true
		if b.onDone != nil {
			b.onDone()
		}
	} else if err != nil {
		b.err = err
	}
	return n, err
}

func (b *body) readLength(p []byte) (int, error) {
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.br.Read(p)
	b.remain -= int64(n)
	switch {
	case b.remain == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) readChunked(p []byte) (int, error) {
	if b.remain == 0 {
		if !b.first {
			if err := b.chunkEnd(); err != nil {
				return 0, err
			}
		}
		b.first = false
		size, err := b.chunkSize()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			return 0, b.readTrailer()
		}
		b.remain = size
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.br.Read(p)
	b.remain -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkEnd reads the CRLF after a chunk's data.
func (b *body) chunkEnd() error {
	crlf, err := b.br.Peek(2)
	if err != nil {
		return eofUnexpected(err)
	}
	if crlf[0] != '\r' || crlf[1] != '\n' {
		return errChunkEnd
	}
	_, _ = b.br.Discard(2)
	return nil
}

// chunkSize reads a chunk-size line: hexadecimal digits, then optional
// extensions (ignored, bounded), then CRLF.
func (b *body) chunkSize() (int64, error) {
	line, err := readLine(b.br, maxChunkLine)
	if err == errLineLong {
		return 0, errChunkLong
	}
	if err != nil {
		return 0, err
	}
	var size int64
	i := 0
	for ; i < len(line) && isHex(line[i]); i++ {
		if i == 15 { // past 2^60 bytes: an overflow attempt
			return 0, errChunkLine
		}
		size = size<<4 | int64(unhex(line[i]))
	}
	if i == 0 {
		return 0, errChunkLine
	}
	ext := line[i:]
	for len(ext) > 0 && (ext[0] == ' ' || ext[0] == '\t') {
		ext = ext[1:]
	}
	if len(ext) > 0 && ext[0] != ';' {
		return 0, errChunkLine
	}
	for _, c := range ext {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, errChunkLine
		}
	}
	// Every chunk may carry some framing for free; beyond that, framing
	// must be paid for with data.
	b.excess += int64(len(line)) + 4 - 16 - 2*size
	b.excess = max(b.excess, 0)
	if b.excess > maxChunkOverhead {
		return 0, errChunkOverhead
	}
	return size, nil
}

// readTrailer reads the fields after the last chunk, up to the empty line.
func (b *body) readTrailer() error {
	left := b.maxTrailer
	for {
		line, err := readLine(b.br, left)
		if err == errLineLong {
			return errTrailerLarge
		}
		if err != nil {
			return err
		}
		left -= len(line) + 2
		if len(line) == 0 {
			return io.EOF
		}
		name, value, perr := parseField(string(line))
		if perr != nil {
			return errTrailer
		}
		if b.trailer != nil && !forbiddenTrailer(name) {
			if *b.trailer == nil {
				*b.trailer = http.Header{}
			}
			(*b.trailer)[name] = append((*b.trailer)[name], value)
		}
	}
}

var errLineLong = errors.New("line too long")

// readLine reads a line ended by CRLF, without it, of at most limit bytes.
// The slice is valid until the next read of br.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(line) > limit+2:
		return nil, errLineLong
	case err != nil:
		return nil, eofUnexpected(err)
	case len(line) < 2 || line[len(line)-2] != '\r':
		return nil, errBareLF
	}
	return line[:len(line)-2], nil
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Close marks the body closed: later reads fail. What is left of it on the
// connection is read, or the connection closed, once the request is done.
func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// finish closes the body for good and reads what is left of it, up to
// limit bytes, unless skip; it reports whether the connection can serve
// another request (the body was read to its end without error).
func (b *body) finish(limit int64, skip bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.beforeRead = nil
	b.onDone = nil
	if b.done || b.err != nil || skip {
		return b.done
	}
	if !b.chunked && b.remain > limit {
		return false
	}
	buf := make([]byte, 4096)
	for n := int64(0); n <= limit; {
		m, err := b.readLocked(buf)
		n += int64(m)
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}

// unread reports whether some of the body is still on the connection.
func (b *body) unread() (bool, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.chunked {
		return !b.done, -1
	}
	return !b.done, b.remain
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
