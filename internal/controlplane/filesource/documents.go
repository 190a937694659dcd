package filesource

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
)

// document is one YAML document of a file: its bytes and the line of the
// file it starts on.
type document struct {
	raw  []byte
	line int
}

// chunkSize is about how much of a file one chunk holds (readChunks).
const chunkSize = 1 << 20

// readChunks reads r to its end in chunks of about chunkSize bytes, each
// ending at the end of a line (but the last), and hashes what it reads.
// A file held as one buffer stays alive as long as any document in it is:
// at 100,000 hostnames, the 171 MB file through the whole decode. In
// chunks, each goes to the collector once the documents in it are decoded
// (decode drops each document's bytes when done with it).
func readChunks(r io.Reader) (chunks [][]byte, sum [sha256.Size]byte, size int64, err error) {
	h := sha256.New()
	var carry []byte // a line begun in the last block
	for {
		// A line longer than a chunk grows its buffer geometrically.
		buf := make([]byte, len(carry), len(carry)+max(chunkSize, len(carry)))
		copy(buf, carry)
		n, rerr := io.ReadFull(r, buf[len(carry):cap(buf)])
		buf = buf[:len(carry)+n]
		h.Write(buf[len(carry):])
		size += int64(n)
		end := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !end {
			return nil, sum, size, rerr
		}
		if end {
			if len(buf) > 0 {
				chunks = append(chunks, buf)
			}
			h.Sum(sum[:0])
			return chunks, sum, size, nil
		}
		carry = nil
		if i := bytes.LastIndexByte(buf, '\n'); i < 0 {
			carry = buf // one long line so far
		} else {
			if i+1 < len(buf) {
				carry = bytes.Clone(buf[i+1:])
			}
			chunks = append(chunks, buf[:i+1])
		}
	}
}

// splitDocuments cuts data at its document separators as
// k8s.io/apimachinery's YAMLReader does (a line starting with "---" and
// holding nothing else but a comment; nothing between two separators is
// no document), and notes the line each document starts on, which errors
// name. On a malformed separator it returns the documents before it and
// the error.
func splitDocuments(data []byte) ([]document, error) {
	return splitChunks([][]byte{data})
}

// splitChunks is splitDocuments over a file read in chunks that end at
// the end of a line (readChunks). A document within one chunk is a slice
// of it; one across chunks is copied into its own buffer, so that no
// document holds more than the chunks it is in.
func splitChunks(chunks [][]byte) ([]document, error) {
	var docs []document
	startChunk, start, startLine := -1, 0, 0
	cut := func(c, pos int) {
		if startChunk == c {
			docs = append(docs, document{raw: chunks[c][start:pos], line: startLine})
			return
		}
		n := len(chunks[startChunk]) - start + pos
		for k := startChunk + 1; k < c; k++ {
			n += len(chunks[k])
		}
		raw := make([]byte, 0, n)
		raw = append(raw, chunks[startChunk][start:]...)
		for k := startChunk + 1; k < c; k++ {
			raw = append(raw, chunks[k]...)
		}
		raw = append(raw, chunks[c][:pos]...)
		docs = append(docs, document{raw: raw, line: startLine})
	}
	line := 0
	for c, data := range chunks {
		for pos := 0; pos < len(data); {
			end := len(data)
			if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
				end = pos + i + 1
			}
			line++
			if l := data[pos:end]; bytes.HasPrefix(l, []byte("---")) {
				if rest := bytes.TrimSpace(l[3:]); len(rest) > 0 && rest[0] != '#' {
					return docs, fmt.Errorf("invalid Yaml document separator: %s", rest)
				}
				if startChunk >= 0 {
					cut(c, pos)
					startChunk = -1
				}
				pos = end
				continue
			}
			if startChunk < 0 {
				startChunk, start, startLine = c, pos, line
			}
			pos = end
		}
	}
	if startChunk >= 0 {
		last := len(chunks) - 1
		cut(last, len(chunks[last]))
	}
	return docs, nil
}
