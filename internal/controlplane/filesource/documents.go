package filesource

import (
	"bytes"
	"fmt"
)

// document is one YAML document of a file: its bytes and the line of the
// file it starts on.
type document struct {
	raw  []byte
	line int
}

// splitDocuments cuts data at its document separators as
// k8s.io/apimachinery's YAMLReader does (a line starting with "---" and
// holding nothing else but a comment; nothing between two separators is
// no document), and notes the line each document starts on, which errors
// name. On a malformed separator it returns the documents before it and
// the error.
func splitDocuments(data []byte) ([]document, error) {
	var docs []document
	start, startLine := -1, 0
	line := 0
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
			if start >= 0 {
				docs = append(docs, document{raw: data[start:pos], line: startLine})
				start = -1
			}
			pos = end
			continue
		}
		if start < 0 {
			start, startLine = pos, line
		}
		pos = end
	}
	if start >= 0 {
		docs = append(docs, document{raw: data[start:], line: startLine})
	}
	return docs, nil
}
