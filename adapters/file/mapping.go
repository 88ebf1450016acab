package file

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/galleon-mesh/galleon/model"
)

// hostSuffix is appended to "<name>.<namespace>" when a service lists no
// hosts. ".internal" is reserved by ICANN for private use, so the default
// names can never shadow a real public DNS name, and the shape mirrors
// Kubernetes' "<name>.<namespace>.svc".
const hostSuffix = ".internal"

// The YAML schema. Field names are the camelCase keys users write; every
// struct here is also walked by checkKnownFields, so a key that is not a
// field is reported with its line instead of being silently ignored.

type serviceSpec struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Hosts       []string          `yaml:"hosts,omitempty"`
	Addresses   []string          `yaml:"addresses,omitempty"`
	Ports       []portSpec        `yaml:"ports,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
	Location    string            `yaml:"location,omitempty"`
	Resolution  string            `yaml:"resolution,omitempty"`
	ExportTo    []string          `yaml:"exportTo,omitempty"`
	Instances   []instanceSpec    `yaml:"instances,omitempty"`
}

type portSpec struct {
	Number   uint32 `yaml:"number"`
	Protocol string `yaml:"protocol,omitempty"`
	Name     string `yaml:"name"`
}

type instanceSpec struct {
	ID             string            `yaml:"id,omitempty"`
	Address        string            `yaml:"address"`
	Ports          map[uint32]uint32 `yaml:"ports,omitempty"`
	Labels         map[string]string `yaml:"labels,omitempty"`
	Locality       string            `yaml:"locality,omitempty"`
	Network        string            `yaml:"network,omitempty"`
	Weight         uint32            `yaml:"weight,omitempty"`
	Health         string            `yaml:"health,omitempty"`
	ServiceAccount string            `yaml:"serviceAccount,omitempty"`
}

// parsedService is one well-formed service and the line it starts on.
type parsedService struct {
	svc  model.Service
	line int
}

// rejection is a record that was skipped: either a whole file (line 0 when
// no line is known, e.g. a read error) or one service in it.
type rejection struct {
	path string
	line int
	err  error
}

// record is the Sink.Rejected record name: "<path>:<line>", or the bare path
// when the problem has no line (an unreadable file).
func (r rejection) record() string {
	if r.line <= 0 {
		return r.path
	}
	return r.path + ":" + strconv.Itoa(r.line)
}

// parsedFile is the outcome of parsing one syntactically valid file.
type parsedFile struct {
	// services are the well-formed services, in file order.
	services []parsedService
	// rejected are the malformed services.
	rejected []badService
}

// badService is a malformed service entry.
type badService struct {
	rejection
	// start is the line the entry starts on.
	start int
	// key is the namespace/name the entry was meant to define, when it
	// could still be read (known); the caller may keep serving the
	// previous version of that service.
	key   model.ServiceKey
	known bool
}

// lineError is an error that knows the line it refers to.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return e.err.Error() }
func (e *lineError) Unwrap() error { return e.err }

func errorAt(line int, format string, args ...any) error {
	return &lineError{line: line, err: fmt.Errorf(format, args...)}
}

// yamlLine finds the "line N" yaml.v3 puts in its syntax and type errors.
// yaml.v3 has no structured error position, so this is the only way to
// point an operator at the right line.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlValue is how yaml.v3 quotes a value in a decoding error:
// "cannot unmarshal !!str `eighty` into uint32".
var yamlValue = regexp.MustCompile("`[^`]*`")

// withoutValues removes the values yaml.v3 quotes in decoding errors: the
// line and the types say what is wrong, and a value (a token pasted into
// the wrong place) must not be echoed into the log.
func withoutValues(err error) error {
	return errors.New(yamlValue.ReplaceAllString(err.Error(), "a value"))
}

// lineOf returns the best line number for err, or fallback.
func lineOf(err error, fallback int) int {
	var le *lineError
	if errors.As(err, &le) && le.line > 0 {
		return le.line
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			return n
		}
	}
	return fallback
}

// maxRefineLines bounds the files whose syntax-error line is refined by
// re-parsing prefixes (quadratic in the number of lines).
const maxRefineLines = 2000

// syntaxErrorLine returns the line of a YAML syntax error in data.
//
// yaml.v3 reports scanner errors (bad characters, unterminated quotes) on
// the right line, but parser errors (bad indentation, unclosed brackets)
// on the zero-based line where the enclosing block started, which can be
// far above the mistake ("line 1: did not find expected key" for a bad
// indent on line 4). The first prefix of the file, starting from the
// reported line, that fails with the same problem ends on the line to
// fix. Requiring the same problem text keeps a prefix that merely cuts a
// multi-line string from being blamed.
func syntaxErrorLine(data []byte, err error) int {
	reported := lineOf(err, 0)
	problem := yamlLine.ReplaceAllString(err.Error(), "")
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxRefineLines {
		return max(reported, 1)
	}
	for k := max(reported, 1); k <= len(lines); k++ {
		prefix := bytes.Join(lines[:k], nil)
		dec := yaml.NewDecoder(bytes.NewReader(prefix))
		for {
			var n yaml.Node
			perr := dec.Decode(&n)
			if perr == nil {
				continue
			}
			if !errors.Is(perr, io.EOF) && yamlLine.ReplaceAllString(perr.Error(), "") == problem {
				return k
			}
			break
		}
	}
	return max(reported, 1)
}

// parseFile parses the content of one registry file. A non-nil rejection
// means the file as a whole is malformed (YAML syntax, wrong top-level
// shape, unknown top-level key) and none of it may be used; otherwise
// malformed services are listed in parsedFile.rejected and the rest is
// usable.
func parseFile(path string, data []byte, defaultNamespace string) (*parsedFile, *rejection) {
	return parseFileIn(nil, path, data, defaultNamespace)
}

// parseFileIn is parseFile with the fast path's nodes from arena (nil: fresh ones); it resets
// the arena before it returns, as nothing it returns points at the nodes.
func parseFileIn(arena *nodeArena, path string, data []byte, defaultNamespace string) (*parsedFile, *rejection) {
	if arena != nil {
		defer arena.reset()
	}
	in := newInterner(len(data))
	var out *parsedFile
	var firstLine map[model.ServiceKey]int
	begin := func() {
		out = &parsedFile{}
		firstLine = map[model.ServiceKey]int{}
	}
	// service parses one item of a services list, in file order.
	service := func(n *yaml.Node) {
		svc, err := parseService(n, defaultNamespace, in)
		if err == nil {
			if prev, dup := firstLine[svc.Key()]; dup {
				err = errorAt(n.Line, "service %s is already defined at line %d of this file", svc.Key(), prev)
			}
		}
		if err != nil {
			key, known := identify(n, defaultNamespace)
			out.rejected = append(out.rejected, badService{
				rejection: rejection{path: path, line: lineOf(err, n.Line), err: err},
				start:     n.Line,
				key:       key,
				known:     known,
			})
			return
		}
		firstLine[svc.Key()] = n.Line
		out.services = append(out.services, parsedService{svc: svc, line: n.Line})
	}
	// document parses the services a document still holds (those fastStream did not hand to
	// service as it parsed them); a document of the wrong shape rejects the file.
	var rej *rejection
	document := func(doc *yaml.Node) bool {
		items, err := servicesOf(doc)
		if err != nil {
			rej = &rejection{path: path, line: lineOf(err, 1), err: err}
			return false
		}
		for _, n := range items {
			service(n)
		}
		return true
	}

	begin()
	if fastStream(data, arena, service, document) {
		if rej != nil {
			return nil, rej
		}
		return out, nil
	}
	// Outside the fast path's subset, yaml.v3 reads the file, from the start.
	begin()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// yaml.v3's own "line N" is often wrong (see syntaxErrorLine):
			// keep it out of the message, the record has the right one.
			msg := strings.TrimPrefix(yamlLine.ReplaceAllString(err.Error(), ""), "yaml: ")
			msg = strings.TrimPrefix(msg, ": ")
			return nil, &rejection{path: path, line: syntaxErrorLine(data, err), err: errors.New("invalid YAML: " + msg)}
		}
		if !document(&doc) {
			return nil, rej
		}
	}
	return out, nil
}

// servicesOf returns the items of the "services" list of one document.
func servicesOf(doc *yaml.Node) ([]*yaml.Node, error) {
	if doc.Kind == 0 { // an empty document, e.g. an empty file
		return nil, nil
	}
	root := doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, errorAt(root.Line, "the file must be a mapping with a \"services\" list, found %s", kindName(root))
	}
	var items []*yaml.Node
	seen := 0
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		if key.Value != "services" {
			return nil, errorAt(key.Line, "unknown top-level key %q: the only key is \"services\"", key.Value)
		}
		if seen > 0 {
			return nil, errorAt(key.Line, "key \"services\" is already defined at line %d", seen)
		}
		seen = key.Line
		if isNull(val) {
			continue
		}
		if val.Kind != yaml.SequenceNode {
			return nil, errorAt(val.Line, "\"services\" must be a list, found %s", kindName(val))
		}
		items = append(items, val.Content...)
	}
	return items, nil
}

// identify reads namespace/name from a service node without validating the
// rest, so that a malformed entry can still be tied to the service it was
// meant to be.
func identify(n *yaml.Node, defaultNamespace string) (model.ServiceKey, bool) {
	name := scalarField(n, "name")
	if name == "" {
		return model.ServiceKey{}, false
	}
	ns := scalarField(n, "namespace")
	if ns == "" {
		ns = defaultNamespace
	}
	return model.ServiceKey{Namespace: ns, Name: name}, true
}

// parseService decodes and validates one item of the services list.
func parseService(n *yaml.Node, defaultNamespace string, in *interner) (model.Service, error) {
	if n.Kind != yaml.MappingNode {
		return model.Service{}, errorAt(n.Line, "a service must be a mapping, found %s", kindName(n))
	}
	if err := checkKnownFields(n, reflect.TypeFor[serviceSpec](), in); err != nil {
		return model.Service{}, serviceErr(n, defaultNamespace, err)
	}
	var spec serviceSpec
	if !decodeService(n, &spec, in) {
		spec = serviceSpec{} // what decodeService filled before it gave up
		if err := n.Decode(&spec); err != nil {
			return model.Service{}, serviceErr(n, defaultNamespace, withoutValues(err))
		}
	}
	svc, err := spec.toModel(n, defaultNamespace, in)
	if err != nil {
		return model.Service{}, serviceErr(n, defaultNamespace, err)
	}
	return svc, nil
}

// serviceErr prefixes err with the service it belongs to, keeping its line.
func serviceErr(n *yaml.Node, defaultNamespace string, err error) error {
	what := "service"
	if key, ok := identify(n, defaultNamespace); ok {
		what = "service " + key.String()
	}
	return &lineError{line: lineOf(err, n.Line), err: fmt.Errorf("%s: %w", what, err)}
}

// toModel validates s and converts it. The model shares the strings and
// slices of s and the values interned in in; s must not be used afterwards.
func (s *serviceSpec) toModel(n *yaml.Node, defaultNamespace string, in *interner) (model.Service, error) {
	for i, e := range s.ExportTo {
		s.ExportTo[i] = in.str(e)
	}
	svc := model.Service{
		Namespace:   in.str(s.Namespace),
		Name:        s.Name,
		Hosts:       nonEmpty(s.Hosts),
		Addresses:   nonEmpty(s.Addresses),
		Labels:      in.strMap(s.Labels),
		Annotations: in.strMap(s.Annotations),
		ExportTo:    nonEmpty(s.ExportTo),
	}
	if svc.Namespace == "" {
		svc.Namespace = defaultNamespace
	}
	if svc.Name == "" {
		return svc, errorAt(n.Line, "name is required")
	}
	if err := validSubdomain(svc.Name); err != nil {
		return svc, errorAt(lineOfField(n, "name"), "name %q: %v", svc.Name, err)
	}
	if err := validLabel(svc.Namespace); err != nil {
		return svc, errorAt(lineOfField(n, "namespace"), "namespace %q: %v", svc.Namespace, err)
	}
	if len(svc.Hosts) == 0 {
		svc.Hosts = []string{svc.Name + "." + svc.Namespace + hostSuffix}
	}
	for i, h := range svc.Hosts {
		if strings.TrimSpace(h) == "" {
			return svc, errorAt(itemLine(n, "hosts", i), "hosts[%d] is empty", i)
		}
	}

	var err error
	if svc.Location, err = parseLocation(s.Location); err != nil {
		return svc, errorAt(lineOfField(n, "location"), "%v", err)
	}
	if svc.Resolution, err = parseResolution(s.Resolution); err != nil {
		return svc, errorAt(lineOfField(n, "resolution"), "%v", err)
	}

	if len(s.Ports) == 0 {
		return svc, errorAt(lineOfField(n, "ports"), "at least one port is required")
	}
	numbers, err := s.portsToModel(n, &svc, in)
	if err != nil {
		return svc, err
	}
	return svc, s.instancesToModel(n, &svc, numbers, in)
}

// portsToModel validates s's ports and sets svc's. It returns the index in
// s.Ports of each port number.
func (s *serviceSpec) portsToModel(n *yaml.Node, svc *model.Service, in *interner) (map[uint32]int, error) {
	numbers := make(map[uint32]int, len(s.Ports))
	names := map[string]int{}
	svc.Ports = make([]model.Port, 0, len(s.Ports))
	for i, p := range s.Ports {
		line := itemLine(n, "ports", i)
		if p.Number == 0 || p.Number > 65535 {
			return nil, errorAt(line, "ports[%d]: number %d is not in 1-65535", i, p.Number)
		}
		if prev, dup := numbers[p.Number]; dup {
			return nil, errorAt(line, "ports[%d]: port %d is already listed at ports[%d]", i, p.Number, prev)
		}
		numbers[p.Number] = i
		proto, err := parseProtocol(p.Protocol)
		if err != nil {
			return nil, errorAt(line, "ports[%d]: %v", i, err)
		}
		if p.Name != "" {
			if prev, dup := names[p.Name]; dup {
				return nil, errorAt(line, "ports[%d]: name %q is already used by ports[%d]", i, p.Name, prev)
			}
			names[p.Name] = i
		}
		svc.Ports = append(svc.Ports, model.Port{Number: p.Number, Protocol: proto, Name: in.str(p.Name)})
	}
	return numbers, nil
}

// instancesToModel validates s's instances and sets svc's; numbers is the
// index of each service port number (portsToModel).
func (s *serviceSpec) instancesToModel(n *yaml.Node, svc *model.Service, numbers map[uint32]int, in *interner) error {
	if len(s.Instances) == 0 {
		return nil
	}
	svc.Instances = make([]model.Instance, 0, len(s.Instances))
	ids := instanceIDs{}
	for i := range s.Instances {
		inst, err := s.Instances[i].toModel(numbers, in)
		line := itemLine(n, "instances", i)
		if err != nil {
			return errorAt(line, "instances[%d]: %v", i, err)
		}
		if prev, dup := ids.add(svc.Instances, inst.ID); dup {
			return errorAt(line, "instances[%d]: id %q is already used by instances[%d] (set a distinct id)", i, inst.ID, prev)
		}
		svc.Instances = append(svc.Instances, inst)
	}
	return nil
}

// instanceIDs finds an instance ID used twice in a service. A service of a few instances is
// searched, not indexed: a map per service was a measurable share of a start's CPU (see
// docs/benchmarks.md, "galleon-file start", BenchmarkParseGenerated).
type instanceIDs struct {
	index map[string]int // nil until the service has instanceIDsIndexed instances
}

const instanceIDsIndexed = 32

// add records id as that of the instance after those of list, which add was told of in order;
// if an instance of list has it already, add returns that one's index and true.
func (ids *instanceIDs) add(list []model.Instance, id string) (int, bool) {
	if ids.index == nil && len(list) >= instanceIDsIndexed {
		ids.index = make(map[string]int, 2*len(list))
		for i := range list {
			ids.index[list[i].ID] = i
		}
	}
	if ids.index == nil {
		for i := range list {
			if list[i].ID == id {
				return i, true
			}
		}
		return 0, false
	}
	if prev, dup := ids.index[id]; dup {
		return prev, true
	}
	ids.index[id] = len(list)
	return 0, false
}

func (s *instanceSpec) toModel(servicePorts map[uint32]int, in *interner) (model.Instance, error) {
	inst := model.Instance{
		ID:             s.ID,
		Address:        in.str(strings.TrimSpace(s.Address)),
		Labels:         in.strMap(s.Labels),
		Locality:       in.str(s.Locality),
		Network:        in.str(s.Network),
		Weight:         s.Weight,
		ServiceAccount: in.str(s.ServiceAccount),
	}
	if inst.Address == "" {
		return inst, errors.New("address is required")
	}
	if len(s.Ports) > 0 {
		inst.Ports = make(map[uint32]uint32, len(s.Ports))
		for svcPort, instPort := range s.Ports {
			if _, ok := servicePorts[svcPort]; !ok {
				return inst, fmt.Errorf("ports: %d is not a port of the service", svcPort)
			}
			if instPort == 0 || instPort > 65535 {
				return inst, fmt.Errorf("ports: %d -> %d is not in 1-65535", svcPort, instPort)
			}
			inst.Ports[svcPort] = instPort
		}
	}
	if strings.Count(inst.Locality, "/") > 2 {
		return inst, fmt.Errorf("locality %q has more than three parts (region/zone/subzone)", inst.Locality)
	}
	var err error
	if inst.Health, err = parseHealth(s.Health); err != nil {
		return inst, err
	}
	if inst.ID == "" {
		inst.ID = defaultInstanceID(inst)
	}
	return inst, nil
}

// defaultInstanceID is "<address>", or "<address>:<port>" with the
// instance port of its lowest mapped service port when it remaps ports, so
// that several instances on one VM differing only by port get distinct IDs
// without the user naming them.
func defaultInstanceID(inst model.Instance) string {
	if len(inst.Ports) == 0 {
		return inst.Address
	}
	lowest := uint32(0)
	for p := range inst.Ports {
		if lowest == 0 || p < lowest {
			lowest = p
		}
	}
	return inst.Address + ":" + strconv.FormatUint(uint64(inst.Ports[lowest]), 10)
}

var protocols = [...]model.Protocol{
	model.ProtocolHTTP, model.ProtocolHTTPS, model.ProtocolHTTP2, model.ProtocolGRPC,
	model.ProtocolTCP, model.ProtocolTLS, model.ProtocolMongo, model.ProtocolMySQL,
	model.ProtocolRedis, model.ProtocolUDP,
}

func parseProtocol(s string) (model.Protocol, error) {
	if s == "" {
		return "", nil // the model's default, TCP
	}
	p := model.Protocol(strings.ToUpper(s))
	// Return the constant, not p: p may be the decoded string itself, one
	// small allocation per port kept for as long as the service is.
	for _, known := range protocols {
		if p == known {
			return known, nil
		}
	}
	return "", fmt.Errorf("protocol %q is not one of HTTP, HTTPS, HTTP2, GRPC, TCP, TLS, MONGO, MYSQL, REDIS, UDP", s)
}

func parseLocation(s string) (model.Location, error) {
	switch strings.ToLower(s) {
	case "", "internal":
		return model.MeshInternal, nil
	case "external":
		return model.MeshExternal, nil
	}
	return 0, fmt.Errorf("location %q is not one of internal, external", s)
}

func parseResolution(s string) (model.Resolution, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return model.ResolutionAuto, nil
	case "static":
		return model.ResolutionStatic, nil
	case "dns":
		return model.ResolutionDNS, nil
	case "none":
		return model.ResolutionNone, nil
	}
	return 0, fmt.Errorf("resolution %q is not one of auto, static, dns, none", s)
}

func parseHealth(s string) (model.Health, error) {
	switch strings.ToLower(s) {
	case "", "healthy":
		return model.Healthy, nil
	case "unhealthy":
		return model.Unhealthy, nil
	case "draining":
		return model.Draining, nil
	}
	return 0, fmt.Errorf("health %q is not one of healthy, unhealthy, draining", s)
}

// checkKnownFields reports the first mapping key in n that has no field in
// t. yaml.v3 only offers strict decoding on a whole Decoder, which would
// turn one bad service into a bad file; walking the node tree keeps the
// error scoped to the service and still points at the offending line.
func checkKnownFields(n *yaml.Node, t reflect.Type, in *interner) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // a type mismatch; Decode reports it with its line
		}
		fields := in.fieldsOf(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			ft, ok := fields.types[key.Value]
			if !ok {
				return errorAt(key.Line, "unknown field %q (known fields: %s)", key.Value, fields.known)
			}
			if err := checkKnownFields(val, ft, in); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for _, item := range n.Content {
			if err := checkKnownFields(item, t.Elem(), in); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkKnownFields(n.Content[i], t.Key(), in); err != nil {
				return err
			}
			if err := checkKnownFields(n.Content[i+1], t.Elem(), in); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// yaml.v3 truncates a float into an integer field: "number: 80.5"
		// would be served as port 80. Only a YAML integer is one.
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" {
			return errorAt(n.Line, "%s is not a whole number", n.Value)
		}
	}
	return nil
}

// structFields are the YAML keys of a struct type.
type structFields struct {
	types map[string]reflect.Type // field type by key
	known string                  // the keys in field order, for errors
}

// fieldsOf returns the keys of struct type t. The interner keeps them for
// the parse: checkKnownFields runs for every service and instance, and
// building them each time was a fifth of all a parse allocated.
func (in *interner) fieldsOf(t reflect.Type) *structFields {
	if f, ok := in.fields[t]; ok {
		return f
	}
	f := &structFields{types: map[string]reflect.Type{}}
	known := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		field := t.Field(i)
		name, _, _ := strings.Cut(field.Tag.Get("yaml"), ",")
		f.types[name] = field.Type
		known = append(known, name)
	}
	f.known = strings.Join(known, ", ")
	in.fields[t] = f
	return f
}

// field returns the value node of key in mapping n, or nil.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func scalarField(n *yaml.Node, key string) string {
	if v := field(n, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// lineOfField is the line of key's value in n, or n's line when absent.
func lineOfField(n *yaml.Node, key string) int {
	if v := field(n, key); v != nil {
		return v.Line
	}
	return n.Line
}

// itemLine is the line of item i of the list under key in n.
func itemLine(n *yaml.Node, key string, i int) int {
	if v := field(n, key); v != nil && v.Kind == yaml.SequenceNode && i < len(v.Content) {
		return v.Content[i].Line
	}
	return lineOfField(n, key)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		// Not the value itself: a file holding something else (a token
		// pasted into the wrong place) must not be echoed into the log.
		switch n.ShortTag() {
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "nothing (null)"
		}
		return fmt.Sprintf("a string of %d bytes", len(n.Value))
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validLabel checks a Kubernetes namespace name (RFC 1123 label): the
// namespace becomes part of the resource name istiod stores.
func validLabel(s string) error {
	if len(s) > 63 || !dnsLabel.MatchString(s) {
		return errors.New("must be at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit")
	}
	return nil
}

// validSubdomain checks a Kubernetes object name (RFC 1123 subdomain).
func validSubdomain(s string) error {
	if len(s) > 253 || !dnsSubdomain.MatchString(s) {
		return errors.New("must be at most 253 lower-case letters, digits, '-' and '.', starting and ending with a letter or digit")
	}
	return nil
}

// nonEmpty returns nil for an empty slice so that equal services compare
// equal whether a list was omitted or written as [].
func nonEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
