package h2

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerBlock decodes the connection's header blocks, a HEADERS frame and
// its CONTINUATIONs each, into one frame and one field slice that the
// read loop reuses: the framer's own decoding (ReadMetaHeaders) makes a
// frame, a closure and a growing field slice per block. The checks are
// the framer's: field names and values as RFC 9113, 8.2.1 asks,
// pseudo-header fields first, once each, and the header list bound
// (SETTINGS_MAX_HEADER_LIST_SIZE) past which the block is truncated and
// fields are no longer kept. Read loop only.
type headerBlock struct {
	dec  *hpack.Decoder
	meta http2.MetaHeadersFrame
	// remain and trailerRemain are what the list bound still allows, the
	// Trailer field counted on its own, as the framer does.
	remain, trailerRemain uint32
	sawRegular            bool
	invalid               error
}

var (
	errFieldValue         = errors.New("invalid header field value")
	errPseudoAfterRegular = errors.New("pseudo-header field after a regular one")
)

// maxKeptFields bounds the field array a connection keeps from one block
// to the next: more than requests commonly carry.
const maxKeptFields = 128

// init makes the decoder, for header lists of maxBytes at most.
func (b *headerBlock) init(maxBytes uint32) {
	b.dec = hpack.NewDecoder(4096, b.emit)
	b.dec.SetMaxStringLength(int(maxBytes))
}

// readFrame reads the next frame; a header block comes whole, as a
// *http2.MetaHeadersFrame valid until the next call.
func (c *conn) readFrame() (http2.Frame, error) {
	f, err := c.fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	hf, ok := f.(*http2.HeadersFrame)
	if !ok {
		return f, nil
	}
	mh, err := c.hb.read(c.fr, hf)
	if err != nil {
		return nil, err
	}
	return mh, nil
}

// read decodes the block that hf starts, reading its CONTINUATION frames
// from fr (the framer checks that nothing comes between them). A block
// that cannot be decoded, one far past the bound, or one that goes on
// after an invalid field (whose size is no longer counted) ends the
// connection; a block with an invalid field resets its stream.
func (b *headerBlock) read(fr *http2.Framer, hf *http2.HeadersFrame) (*http2.MetaHeadersFrame, error) {
	// The last block's fields are cleared, not only cut: the slots past a
	// smaller block's would keep its strings alive for the connection's
	// life; an array grown by a block of many fields is let go.
	clear(b.meta.Fields)
	fields := b.meta.Fields[:0]
	if cap(fields) > maxKeptFields {
		fields = nil
	}
	b.meta = http2.MetaHeadersFrame{HeadersFrame: hf, Fields: fields}
	b.remain, b.trailerRemain = fr.MaxHeaderListSize, fr.MaxHeaderListSize
	b.sawRegular, b.invalid = false, nil
	b.dec.SetEmitEnabled(true)
	frag, ended := hf.HeaderBlockFragment(), hf.HeadersEnded()
	for {
		if int64(len(frag)) > 2*(int64(b.remain)+int64(b.trailerRemain)) || b.invalid != nil {
			return nil, http2.ConnectionError(codeProtocol)
		}
		if _, err := b.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		cf, ok := f.(*http2.ContinuationFrame)
		if !ok {
			return nil, http2.ConnectionError(codeProtocol)
		}
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := b.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if b.invalid == nil {
		b.invalid = checkPseudoFields(b.meta.PseudoFields())
	}
	if b.invalid != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: codeProtocol, Cause: b.invalid}
	}
	return &b.meta, nil
}

// emit takes a decoded field (the decoder's emit function, bound once).
// After an invalid field or past the bound, the decoder goes on only to
// keep its table in step with the client's.
func (b *headerBlock) emit(f hpack.HeaderField) {
	switch {
	case !httpguts.ValidHeaderFieldValue(f.Value):
		// The value is not named: it may be a secret.
		b.invalid = fmt.Errorf("%w in %s", errFieldValue, f.Name)
	case f.IsPseudo():
		if b.sawRegular {
			b.invalid = errPseudoAfterRegular
		}
	default:
		b.sawRegular = true
		if !validFieldName(f.Name) {
			b.invalid = fmt.Errorf("invalid header field name %q", f.Name)
		}
	}
	if b.invalid != nil {
		b.dec.SetEmitEnabled(false)
		return
	}
	remain, size := &b.remain, f.Size()
	if f.Name == "trailer" {
		// Counted as the list of fields it names, each with a field's
		// overhead.
		n := uint32(strings.Count(f.Value, ",") + 1)
		remain, size = &b.trailerRemain, uint32(len(f.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *remain {
		b.dec.SetEmitEnabled(false)
		b.meta.Truncated = true
		b.remain, b.trailerRemain = 0, 0
		return
	}
	*remain -= size
	b.meta.Fields = append(b.meta.Fields, f)
}

// validFieldName tells whether name is a token without uppercase
// letters, as a field name on the wire must be (RFC 9113, 8.2.1).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// checkPseudoFields refuses an unknown pseudo-header field, one that
// appears twice, and a mix of request and response ones (RFC 9113,
// 8.3).
func checkPseudoFields(fields []hpack.HeaderField) error {
	var request, response bool
	for i, f := range fields {
		switch f.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return fmt.Errorf("unknown pseudo-header field %q", f.Name)
		}
		for _, g := range fields[:i] {
			if g.Name == f.Name {
				return fmt.Errorf("pseudo-header field %s twice", f.Name)
			}
		}
	}
	if request && response {
		return errors.New("request and response pseudo-header fields")
	}
	return nil
}
