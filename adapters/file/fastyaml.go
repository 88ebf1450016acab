package file

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// fastDocuments builds the same yaml.v3 node trees that yaml.v3's parser builds, for a subset of
// YAML that registry files are written in, several times faster (see docs/benchmarks.md,
// "galleon-file start", BenchmarkParseGenerated). It returns ok=false for anything outside the
// subset, and parseFile then uses yaml.v3, so what a file means never depends on which parser
// read it; FuzzFastDocuments and TestFastDocumentsMatchYAMLv3 compare the two.
//
// yaml.v3's parser was most of the CPU time of reading the directory at start: it builds a token
// queue, an event stream and then the nodes, where this builds the nodes in one pass.
//
// The subset:
//   - ASCII without tabs, carriage returns or other control characters;
//   - documents separated by lines that are exactly "---", none empty;
//   - block mappings with plain or quoted keys, and block sequences (also indentless, as a
//     mapping's value), their entries on one line each or nested by indentation;
//   - flow mappings and sequences on one line;
//   - plain scalars on one line, without ':' or '#' inside them and starting with none of
//     YAML's indicators; single-quoted scalars; double-quoted scalars without escapes;
//   - comments (dropped: yaml.v3 keeps them in the nodes, and nothing here reads them).
//
// No anchors, aliases, tags, block scalars, multi-line scalars or flows, merge keys or empty
// values.
//
// Nodes come from arena, which may be nil (fresh nodes); the trees are valid until the arena's
// next reset.
func fastDocuments(data []byte, arena *nodeArena) (docs []*yaml.Node, ok bool) {
	ok = fastStream(data, arena, nil, func(doc *yaml.Node) bool {
		docs = append(docs, doc)
		return true
	})
	if !ok {
		return nil, false
	}
	return docs, true
}

// fastStream is fastDocuments for parseFile, which needs a service's nodes only while it
// decodes that service. Each entry of a block sequence that is the value of the top-level key
// "services" is handed to item as soon as it is parsed, is left out of the tree, and its nodes
// are reused for the next entry; the rest of each document is handed to docDone once the
// document is complete. A file's tree was the largest part of a start's allocation, and the
// collector scanned it over and over (docs/benchmarks.md, "galleon-file start"); the nodes of one service stay in the processor's cache.
// item may be nil: every node stays in its tree.
//
// It returns false, with what it handed to item and docDone to be dropped, when data is
// outside the subset. It returns true when every document was handed to docDone, or when
// docDone returned false, which stops it.
func fastStream(data []byte, arena *nodeArena, item func(*yaml.Node), docDone func(*yaml.Node) bool) bool {
	for _, c := range data {
		if c >= 0x7f || (c < 0x20 && c != '\n') {
			return false
		}
	}
	if arena == nil {
		arena = &nodeArena{}
	}
	p := fastParser{data: data, line: 1, arena: arena, item: item}
	docs := 0
	for {
		p.skipBlankLines()
		if p.pos >= len(p.data) {
			return true
		}
		doc := &yaml.Node{Kind: yaml.DocumentNode, Line: p.line, Column: p.col() + 1}
		if p.atDocumentMarker() {
			p.nextLine()
			p.skipBlankLines()
			if p.pos >= len(p.data) || p.atDocumentMarker() {
				return false // an empty document
			}
		} else if docs > 0 {
			return false
		}
		if p.indent() != 0 {
			return false
		}
		root := p.blockNode(0, 0)
		if root == nil {
			return false
		}
		if p.skipBlankLines(); p.pos < len(p.data) && !p.atDocumentMarker() {
			return false // content left at a lower indentation than its block's
		}
		doc.Content = []*yaml.Node{root}
		docs++
		if !docDone(doc) {
			return true
		}
	}
}

const (
	// maxFastDepth bounds nesting; deeper files are left to yaml.v3.
	maxFastDepth = 32
	// maxFastKey is below YAML's limit of 1024 characters on an implicit key, which yaml.v3
	// enforces.
	maxFastKey = 1000
)

type fastParser struct {
	data      []byte
	pos       int
	line      int // 1-based line of pos
	lineStart int // offset of that line's first byte
	arena     *nodeArena
	// item, if set, takes the entries of the top-level "services" block sequence (fastStream);
	// rootKey is the top-level key whose value is being parsed.
	item    func(*yaml.Node)
	rootKey string
}

func (p *fastParser) col() int { return p.pos - p.lineStart }

func (p *fastParser) peek() byte {
	if p.pos < len(p.data) {
		return p.data[p.pos]
	}
	return '\n'
}

func (p *fastParser) peekAt(i int) byte {
	if p.pos+i < len(p.data) {
		return p.data[p.pos+i]
	}
	return '\n'
}

// nextLine moves to the start of the next line.
func (p *fastParser) nextLine() {
	for p.pos < len(p.data) && p.data[p.pos] != '\n' {
		p.pos++
	}
	if p.pos < len(p.data) {
		p.pos++
	}
	p.line++
	p.lineStart = p.pos
}

// skipBlankLines moves from the start of a line past lines holding only spaces or a comment,
// to the first non-space byte of the next line with content (or the end).
func (p *fastParser) skipBlankLines() {
	for p.pos < len(p.data) {
		p.skipSpaces()
		if c := p.peek(); c != '\n' && c != '#' {
			return
		}
		p.nextLine()
	}
}

func (p *fastParser) skipSpaces() {
	for p.pos < len(p.data) && p.data[p.pos] == ' ' {
		p.pos++
	}
}

// indent is the column of pos, at a line's first non-space byte.
func (p *fastParser) indent() int { return p.col() }

func (p *fastParser) atDocumentMarker() bool {
	return p.col() == 0 && p.peek() == '-' && p.peekAt(1) == '-' && p.peekAt(2) == '-' && p.peekAt(3) == '\n'
}

// endOfLine accepts spaces and a comment after a value, then moves to the next line with content.
func (p *fastParser) endOfLine() bool {
	start := p.pos
	p.skipSpaces()
	switch p.peek() {
	case '\n':
	case '#':
		if p.pos == start {
			return false // "#" right after a value is not a comment
		}
	default:
		return false
	}
	p.nextLine()
	p.skipBlankLines()
	return true
}

// atSequenceEntry says whether pos is at "- " or a "-" ending the line.
func (p *fastParser) atSequenceEntry() bool {
	return p.peek() == '-' && (p.peekAt(1) == ' ' || p.peekAt(1) == '\n')
}

// blockNode parses the block node at pos, the first byte of content on its line, whose column
// is its indentation.
func (p *fastParser) blockNode(indent, depth int) *yaml.Node {
	if depth > maxFastDepth {
		return nil
	}
	if p.atSequenceEntry() {
		return p.blockSequence(indent, depth)
	}
	return p.blockMapping(indent, depth)
}

func (p *fastParser) blockSequence(indent, depth int) *yaml.Node {
	seq := p.node(yaml.SequenceNode, p.line, p.col())
	seq.Tag = "!!seq"
	// A sequence at depth 1 is the value of a key of the top-level mapping.
	stream := p.item != nil && depth == 1 && p.rootKey == "services"
	for p.pos < len(p.data) && p.indent() == indent && p.atSequenceEntry() {
		mark := p.arena.mark()
		p.pos++ // '-'
		p.skipSpaces()
		var item *yaml.Node
		switch c := p.peek(); {
		case c == '\n' || c == '#' || p.atSequenceEntry():
			return nil // the entry on the next lines, or "- - x"
		case c == '{' || c == '[' || c == '"' || c == '\'':
			if item = p.flowNode(depth + 1); item == nil || !p.endOfLine() {
				return nil
			}
		default:
			if p.plainKeyAhead() {
				item = p.blockMapping(p.col(), depth+1)
			} else if item = p.plain(false); item == nil || !p.endOfLine() {
				return nil
			}
		}
		if item == nil {
			return nil
		}
		if p.pos < len(p.data) && p.indent() > indent {
			return nil
		}
		if stream {
			p.item(item)
			p.arena.rewind(mark)
			continue
		}
		seq.Content = append(seq.Content, item)
	}
	return seq
}

func (p *fastParser) blockMapping(indent, depth int) *yaml.Node {
	m := p.node(yaml.MappingNode, p.line, p.col())
	m.Tag = "!!map"
	for p.pos < len(p.data) && p.indent() == indent && !p.atDocumentMarker() {
		if p.atSequenceEntry() {
			if len(m.Content) == 0 {
				return nil
			}
			return m // an indentless sequence's next entry, or a parent's: the parent decides
		}
		keyStart := p.pos
		key := p.scalar(false)
		if key == nil || key.Value == "<<" || p.peek() != ':' || p.pos-keyStart > maxFastKey {
			return nil
		}
		p.pos++ // ':'
		if c := p.peek(); c != ' ' && c != '\n' {
			return nil
		}
		if depth == 0 {
			p.rootKey = key.Value
		}
		value := p.blockValue(indent, depth)
		if value == nil {
			return nil
		}
		m.Content = append(m.Content, key, value)
		if p.pos < len(p.data) && p.indent() > indent {
			return nil
		}
	}
	if len(m.Content) == 0 {
		return nil
	}
	return m
}

// blockValue parses a mapping value: on the rest of the line, or a block node on the next lines
// (an indentless sequence at the key's own indentation).
func (p *fastParser) blockValue(keyIndent, depth int) *yaml.Node {
	p.skipSpaces()
	switch c := p.peek(); c {
	case '\n', '#':
		// A space or the line's end follows the ':', so a '#' here starts a comment.
		p.nextLine()
		if p.skipBlankLines(); p.pos >= len(p.data) {
			return nil // an empty value
		}
		ind := p.indent()
		if ind > keyIndent || (ind == keyIndent && p.atSequenceEntry()) {
			if p.atSequenceEntry() {
				return p.blockSequence(ind, depth+1)
			}
			return p.blockMapping(ind, depth+1)
		}
		return nil // an empty value
	case '{', '[', '"', '\'':
		v := p.flowNode(depth + 1)
		if v == nil || !p.endOfLine() {
			return nil
		}
		return v
	default:
		if p.atSequenceEntry() {
			return nil
		}
		v := p.plain(false)
		if v == nil || !p.endOfLine() {
			return nil
		}
		return v
	}
}

// plainKeyAhead says whether the plain scalar at pos is followed by ": " or ":" at the end of
// the line, making it a key.
func (p *fastParser) plainKeyAhead() bool {
	for i := p.pos; i < len(p.data); i++ {
		switch p.data[i] {
		case ':':
			return i+1 >= len(p.data) || p.data[i+1] == ' ' || p.data[i+1] == '\n'
		case '\n', '#':
			return false
		}
	}
	return false
}

// flowNode parses a flow mapping, flow sequence or quoted scalar on the current line.
func (p *fastParser) flowNode(depth int) *yaml.Node {
	if depth > maxFastDepth {
		return nil
	}
	switch p.peek() {
	case '{':
		return p.flowCollection(yaml.MappingNode, depth)
	case '[':
		return p.flowCollection(yaml.SequenceNode, depth)
	default:
		return p.scalar(true)
	}
}

func (p *fastParser) flowCollection(kind yaml.Kind, depth int) *yaml.Node {
	n := p.node(kind, p.line, p.col())
	n.Style = yaml.FlowStyle
	closing := byte(']')
	n.Tag = "!!seq"
	if kind == yaml.MappingNode {
		closing = '}'
		n.Tag = "!!map"
	}
	p.pos++ // '{' or '['
	p.skipSpaces()
	if p.peek() == closing {
		p.pos++
		return n
	}
	for {
		itemStart := p.pos
		var item *yaml.Node
		if c := p.peek(); c == '{' || c == '[' {
			if kind == yaml.MappingNode {
				return nil // a collection as a key
			}
			item = p.flowNode(depth + 1)
		} else {
			item = p.scalar(true)
		}
		if item == nil {
			return nil
		}
		p.skipSpaces()
		if kind == yaml.MappingNode {
			if item.Value == "<<" || p.peek() != ':' || p.peekAt(1) != ' ' || p.pos-itemStart > maxFastKey {
				return nil
			}
			p.pos++
			p.skipSpaces()
			value := p.flowNode(depth + 1)
			if value == nil {
				return nil
			}
			n.Content = append(n.Content, item, value)
			p.skipSpaces()
		} else {
			if p.peek() == ':' {
				return nil // a single-pair mapping in a sequence
			}
			n.Content = append(n.Content, item)
		}
		switch p.peek() {
		case ',':
			p.pos++
			p.skipSpaces()
			if c := p.peek(); c == closing || c == ',' {
				return nil
			}
		case closing:
			p.pos++
			return n
		default:
			return nil
		}
	}
}

// scalar parses a quoted or plain scalar.
func (p *fastParser) scalar(flow bool) *yaml.Node {
	switch p.peek() {
	case '"':
		return p.quoted('"', yaml.DoubleQuotedStyle)
	case '\'':
		return p.quoted('\'', yaml.SingleQuotedStyle)
	default:
		return p.plain(flow)
	}
}

// quoted parses a single-quoted scalar, or a double-quoted one without escapes, on one line.
func (p *fastParser) quoted(q byte, style yaml.Style) *yaml.Node {
	n := p.node(yaml.ScalarNode, p.line, p.col())
	n.Tag, n.Style = "!!str", style
	p.pos++
	var value []byte
	start := p.pos
	for {
		c := p.peek()
		switch {
		case c == '\n':
			return nil
		case c == '\\' && q == '"':
			return nil
		case c == q && q == '\'' && p.peekAt(1) == '\'':
			value = append(value, p.data[start:p.pos+1]...)
			p.pos += 2
			start = p.pos
			continue
		case c == q:
			if value == nil {
				n.Value = string(p.data[start:p.pos])
			} else {
				n.Value = string(append(value, p.data[start:p.pos]...))
			}
			p.pos++
			return n
		}
		p.pos++
	}
}

// plain parses a plain scalar on one line. It ends before ": ", " #", the end of the line and,
// in a flow, ",", "]" and "}"; trailing spaces are not part of it.
func (p *fastParser) plain(flow bool) *yaml.Node {
	line, col := p.line, p.col()
	if col == 0 && (p.peek() == '-' || p.peek() == '.') && p.peekAt(1) == p.peek() && p.peekAt(2) == p.peek() &&
		(p.peekAt(3) == ' ' || p.peekAt(3) == '\n') {
		return nil // "--- x" starts a document, "..." ends one
	}
	switch c := p.peek(); c {
	case '-':
		if n := p.peekAt(1); n == ' ' || n == '\n' {
			return nil
		}
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', '\n', ' ':
		return nil
	}
	start, end := p.pos, p.pos
	for {
		c := p.peek()
		switch {
		case c == '\n':
		case c == ':':
			if n := p.peekAt(1); n != ' ' && n != '\n' {
				return nil
			}
		case c == '#':
			if p.data[p.pos-1] != ' ' {
				return nil
			}
		case flow && (c == ',' || c == ']' || c == '}' || c == '[' || c == '{' || c == '?'):
			if c == '[' || c == '{' || c == '?' {
				return nil // yaml.v3 ends a plain scalar in a flow at these too
			}
		default:
			p.pos++
			if c != ' ' {
				end = p.pos
			}
			continue
		}
		break
	}
	p.pos = end // trailing spaces are the caller's to skip
	value := string(p.data[start:end])
	if value == "<<" {
		return nil // a merge key's tag, even as a value
	}
	n := p.node(yaml.ScalarNode, line, col)
	n.Value = value
	if mayResolve(value[0]) && strings.Count(value, ".") < 2 {
		n.Tag = n.ShortTag() // what yaml.v3 resolves a plain scalar to
	} else {
		// yaml.v3 resolves no other first byte, and no number or timestamp
		// has two dots (an IP address does: resolve would try and fail to
		// parse it as each, allocating an error every time).
		n.Tag = "!!str"
	}
	return n
}

// mayResolve says whether yaml.v3 may resolve a plain scalar starting with c to something other
// than a string (its resolveTable): signs, digits, ".", "~" and the first letters of true, false,
// null, yes, no, on and off.
func mayResolve(c byte) bool {
	switch c {
	case '+', '-', '.', '~', 'y', 'Y', 'n', 'N', 't', 'T', 'f', 'F', 'o', 'O':
		return true
	}
	return '0' <= c && c <= '9'
}

// node returns a zeroed node from the parser's arena.
func (p *fastParser) node(kind yaml.Kind, line, col int) *yaml.Node {
	return p.arena.node(kind, line, col+1)
}

// nodeArena hands out yaml.Nodes from slabs, one allocation per nodeSlab nodes instead of one
// each, and after reset hands out the same nodes again, keeping their Content arrays' capacity.
// parsePool gives each goroutine one for all the files it parses: fresh nodes were most of the
// bytes a parse allocated (see docs/benchmarks.md, BenchmarkParseGenerated).
type nodeArena struct {
	slabs [][]yaml.Node
	slab  int // slabs[slab] is being handed out
	next  int // its next node
}

const nodeSlab = 256

// reset makes every node handed out so far available again: the trees they formed must no
// longer be used.
func (a *nodeArena) reset() { a.slab, a.next = 0, 0 }

// arenaMark is a point of an arena's handing out, to rewind to.
type arenaMark struct{ slab, next int }

func (a *nodeArena) mark() arenaMark { return arenaMark{a.slab, a.next} }

// rewind makes the nodes handed out since m available again: the trees they formed must no
// longer be used.
func (a *nodeArena) rewind(m arenaMark) { a.slab, a.next = m.slab, m.next }

func (a *nodeArena) node(kind yaml.Kind, line, col int) *yaml.Node {
	if a.slab < len(a.slabs) && a.next == nodeSlab {
		a.slab, a.next = a.slab+1, 0
	}
	if a.slab == len(a.slabs) {
		a.slabs = append(a.slabs, make([]yaml.Node, nodeSlab))
	}
	n := &a.slabs[a.slab][a.next]
	a.next++
	content := n.Content[:0]
	*n = yaml.Node{Kind: kind, Line: line, Column: col, Content: content}
	return n
}
