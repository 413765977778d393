package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Value is the text of one JSON value that [Parse] has checked (or a part of one), with
// no surrounding whitespace. The empty Value stands for an absent member: every reader
// judges it the wrong type.
type Value string

// SyntaxError says why a text is not one JSON value the reader accepts.
type SyntaxError struct {
	// Line and Column (1-based; columns count characters) locate the first byte that
	// cannot be part of the text, or its end when it ends too early.
	Line, Column int
	// Repeated is the JSON path of a repeated member name ("" is not a path: the
	// error is then a syntax error described by Msg). "routes[2].hostname".
	Repeated string
	// Msg says what is wrong at Line and Column.
	Msg string
}

func (e *SyntaxError) Error() string {
	if e.Repeated != "" {
		return e.Repeated + " is repeated"
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Parse checks that data is exactly one JSON value: valid syntax (RFC 8259), valid UTF-8,
// and no object with a member name twice (names compare after unescaping). It returns the
// value's text (one copy of data, whitespace trimmed) or a *SyntaxError. data is not
// retained.
//
// This is where every untrusted JSON text starts but the route table, which a Stream
// reads without holding a copy: one pass of jsontext's validator and one copy.
func Parse(data []byte) (Value, error) {
	if !jsontext.Value(data).IsValid() {
		return "", syntaxError(data)
	}
	return Value(bytes.Trim(data, " \t\r\n")), nil
}

// ObjectBody parses raw, an untrusted body found at path, and reads it with Object: a
// repeated name is reported as "PATH.NAME is repeated", any other text that is not one
// JSON object as "PATH must be an object". The result is nil when raw is not an object.
func ObjectBody(raw []byte, path string, e *Errors, required, optional []string) Members {
	v, err := Parse(raw)
	if err != nil && IsRepeated(err) {
		e.AddSyntax(err, path, "")
		return nil
	}
	return Object(v, path, e, required, optional) // "" when raw is not JSON
}

// AddSyntax records a Parse error found in a text below path: a repeated name as
// "PATH.NAME is repeated", anything else as "line L, column C: WHAT is not valid JSON: MSG"
// (what defaults to path's Name).
func (e *Errors) AddSyntax(err error, path, what string) {
	var se *SyntaxError
	if !errors.As(err, &se) {
		e.Addf("", "%s is not valid JSON", Name(path))
		return
	}
	if se.Repeated != "" {
		e.Addf(joinPath(path, se.Repeated), "is repeated")
		return
	}
	if what == "" {
		what = Name(path)
	}
	e.Addf("", "line %d, column %d: %s is not valid JSON: %s", se.Line, se.Column, what, se.Msg)
}

// joinPath appends a relative path ("a.b", "[2].c") to path.
func joinPath(path, rel string) string {
	if path == "" || strings.HasPrefix(rel, "[") {
		return path + rel
	}
	return path + "." + rel
}

// syntaxError explains why jsontext refused data. Where encoding/json refuses it too, the
// position and words are encoding/json's (operators and tests know them); what only
// jsontext refuses (a repeated name, invalid UTF-8) is located by jsontext.
func syntaxError(data []byte) *SyntaxError {
	var se *json.SyntaxError
	if err := json.Unmarshal(data, new(json.RawMessage)); errors.As(err, &se) {
		pos := int(se.Offset) - 1 // Offset counts the offending byte
		if se.Offset >= int64(len(data)) && strings.HasPrefix(se.Error(), "unexpected end") {
			pos = len(data)
		}
		pos = max(0, min(pos, len(data)))
		line, col := lineColumn(data, pos)
		return &SyntaxError{Line: line, Column: col, Msg: se.Error()}
	}
	d := jsontext.NewDecoder(bytes.NewBuffer(data))
	_, err := d.ReadValue()
	if err == nil {
		_, err = d.ReadToken()
		if err == nil {
			err = errors.New("invalid data after top-level value")
		}
	}
	var jse *jsontext.SyntacticError
	if !errors.As(err, &jse) {
		return &SyntaxError{Line: 1, Column: 1, Msg: "not one JSON value"}
	}
	pos := int(max(0, min(jse.ByteOffset, int64(len(data)))))
	if errors.Is(jse.Err, jsontext.ErrDuplicateName) {
		if p := memberPath(data, pos); p != "" {
			return &SyntaxError{Repeated: p}
		}
	}
	line, col := lineColumn(data, pos)
	return &SyntaxError{Line: line, Column: col, Msg: jse.Err.Error()}
}

// memberPath is the JSON path ("routes[2].hostname") of the member whose name starts at
// data[pos]: the decoder (which tolerates the repetition this time) is walked to it.
func memberPath(data []byte, pos int) string {
	d := jsontext.NewDecoder(bytes.NewBuffer(data), jsontext.AllowDuplicateNames(true))
	for d.InputOffset() <= int64(pos) {
		if _, err := d.ReadToken(); err != nil {
			return ""
		}
	}
	path := ""
	level := 0
	for tok := range d.StackPointer().Tokens() {
		level++
		if kind, _ := d.StackIndex(level); kind == '[' {
			path += "[" + tok + "]"
		} else {
			path = Join(path, tok)
		}
	}
	return path
}

// lineColumn returns the 1-based line and column of data[pos].
func lineColumn(data []byte, pos int) (line, col int) {
	before := data[:pos]
	line = 1 + bytes.Count(before, []byte{'\n'})
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return line, 1 + utf8.RuneCount(before)
}

// IsRepeated reports whether err is a Parse error for a repeated member name.
func IsRepeated(err error) bool {
	var se *SyntaxError
	return errors.As(err, &se) && se.Repeated != ""
}
