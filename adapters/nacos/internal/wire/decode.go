package wire

import (
	"errors"
	"io"
	"strings"
)

// Limits bounds what a decoder accepts of one answer. Everything in an answer is the server's
// to choose; an answer beyond a limit is rejected whole (a *DecodeError naming the limit), not
// truncated: a partial instance list would be served as if it were complete.
type Limits struct {
	// MaxInstances is the most instances one service may have.
	MaxInstances int
	// MaxMetadataEntries is the most metadata entries one instance may have.
	MaxMetadataEntries int
	// MaxKeyBytes and MaxValueBytes bound a metadata entry's key and value.
	MaxKeyBytes, MaxValueBytes int
	// MaxStringBytes bounds every other string: names, IPs, cluster names, checksums.
	MaxStringBytes int
	// MaxServiceNames is the most service names one page of a listing may have.
	MaxServiceNames int
}

// DefaultLimits are generous for real registries (Dubbo instances carry tens of metadata
// entries, some of them long method lists) and small enough that one answer cannot exhaust
// memory beyond the gRPC message bound.
func DefaultLimits() Limits {
	return Limits{
		MaxInstances:       20000,
		MaxMetadataEntries: 256,
		MaxKeyBytes:        256,
		MaxValueBytes:      16 << 10,
		MaxStringBytes:     1024,
		MaxServiceNames:    10000,
	}
}

// orDefaults fills zero fields with DefaultLimits.
func (l Limits) orDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, d *int }{
		{&l.MaxInstances, &d.MaxInstances}, {&l.MaxMetadataEntries, &d.MaxMetadataEntries},
		{&l.MaxKeyBytes, &d.MaxKeyBytes}, {&l.MaxValueBytes, &d.MaxValueBytes},
		{&l.MaxStringBytes, &d.MaxStringBytes}, {&l.MaxServiceNames, &d.MaxServiceNames},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	return l
}

// DecodeServiceInfo decodes one ServiceInfo JSON object (a Nacos 1 /v1/ns/instance/list answer
// or UDP push, or the serviceInfo of a Nacos 2 answer) within lim. Unknown fields are skipped;
// both spellings of the protect-threshold flag are read.
func DecodeServiceInfo(data []byte, lim Limits) (*ServiceInfo, error) {
	d := newJSONDecoder(data, "ServiceInfo", lim)
	info, err := d.serviceInfo()
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return nil, err
	}
	return info, nil
}

// jsonDecoder walks a JSON document value by value, so that counts are checked as they grow
// (no unbounded intermediate map or slice is built first).
type jsonDecoder struct {
	lx   lexer
	what string
	lim  Limits
}

func newJSONDecoder(data []byte, what string, lim Limits) *jsonDecoder {
	return &jsonDecoder{lx: lexer{data: data}, what: what, lim: lim.orDefaults()}
}

func (d *jsonDecoder) fail(err error, format string, args ...any) error {
	var de *DecodeError
	if errors.As(err, &de) {
		return err
	}
	return decodeErr(d.what, err, format, args...)
}

func (d *jsonDecoder) syntax(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return d.fail(err, "malformed JSON: %v", err)
}

// end checks that nothing follows the document.
func (d *jsonDecoder) end() error {
	if d.lx.space(); d.lx.pos < len(d.lx.data) {
		return d.fail(nil, "data after the JSON document")
	}
	return nil
}

// open consumes the opening byte of an object or array (or a null: ok false), or says what
// came instead.
func (d *jsonDecoder) open(c byte, name string) (ok bool, err error) {
	b, err := d.lx.peek()
	if err != nil {
		return false, d.syntax(err)
	}
	switch b {
	case c:
		d.lx.pos++
		return true, nil
	case 'n':
		if err := d.lx.literal("null"); err != nil {
			return false, d.syntax(err)
		}
		return false, nil
	}
	want := "an object"
	if c == '[' {
		want = "an array"
	}
	if name != "" {
		name += ": "
	}
	return false, d.fail(nil, "%swant %s, got %s", name, want, kindAt(b))
}

// more consumes what follows an element of the container that end closes: true before the
// next element (a ',' consumed), false at its end (end consumed). first is true before the
// first element.
func (d *jsonDecoder) more(end byte, first bool) (bool, error) {
	b, err := d.lx.peek()
	if err != nil {
		return false, d.syntax(err)
	}
	switch {
	case b == end:
		d.lx.pos++
		return false, nil
	case first:
		return true, nil
	case b == ',':
		d.lx.pos++
		return true, nil
	}
	return false, d.syntax(d.lx.unexpected("after a value in an object or array"))
}

// object reads an object (or null, which calls nothing), calling field for each key; field must
// consume the key's value.
func (d *jsonDecoder) object(field func(key string) error) error {
	ok, err := d.open('{', "")
	if !ok {
		return err
	}
	for first := true; ; first = false {
		more, err := d.more('}', first)
		if !more {
			return err
		}
		b, err := d.lx.peek()
		if err == nil && b != '"' {
			err = d.lx.unexpected("looking for beginning of object key string")
		}
		var key string
		if err == nil {
			key, err = d.lx.key()
		}
		if err == nil {
			err = d.lx.expect(':', "after object key")
		}
		if err != nil {
			return d.syntax(err)
		}
		if err := field(key); err != nil {
			return err
		}
	}
}

// array reads an array (or null), calling elem for each element, at most limit of them.
func (d *jsonDecoder) array(name string, limit int, elem func() error) error {
	ok, err := d.open('[', name)
	if !ok {
		return err
	}
	for n := 0; ; n++ {
		more, err := d.more(']', n == 0)
		if !more {
			return err
		}
		if n >= limit {
			return d.fail(nil, "more than %d %s", limit, name)
		}
		if err := elem(); err != nil {
			return err
		}
	}
}

func (d *jsonDecoder) skip() error {
	if err := d.lx.skip(0); err != nil {
		return d.syntax(err)
	}
	return nil
}

// scalar decodes one value into v (null leaves v as it is): a *string, *bool, *int, *int64,
// *float64 or *json.RawMessage.
func (d *jsonDecoder) scalar(name string, v any) error {
	wrong, err := d.lx.scalar(v)
	if err != nil {
		return d.syntax(err)
	}
	if wrong != "" {
		return d.fail(nil, "%s: want %s", name, wrong)
	}
	return nil
}

func (d *jsonDecoder) str(name string, limit int) (string, error) {
	var s string
	if err := d.scalar(name, &s); err != nil {
		return "", err
	}
	if len(s) > limit {
		return "", d.fail(nil, "%s longer than %d bytes", name, limit)
	}
	return s, nil
}

func (d *jsonDecoder) serviceInfo() (*ServiceInfo, error) {
	info := &ServiceInfo{}
	err := d.object(func(key string) error {
		var err error
		switch key {
		case "name":
			info.Name, err = d.str("name", d.lim.MaxStringBytes)
		case "groupName":
			info.GroupName, err = d.str("groupName", d.lim.MaxStringBytes)
		case "clusters":
			info.Clusters, err = d.str("clusters", d.lim.MaxStringBytes)
		case "checksum":
			info.Checksum, err = d.str("checksum", d.lim.MaxStringBytes)
		case "cacheMillis":
			err = d.scalar("cacheMillis", &info.CacheMillis)
		case "lastRefTime":
			err = d.scalar("lastRefTime", &info.LastRefTime)
		case "reachProtectionThreshold", "reachProtectThreshold":
			err = d.scalar(key, &info.ReachProtectionThreshold)
		case "hosts":
			info.Hosts = info.Hosts[:0]
			err = d.array("instances", d.lim.MaxInstances, func() error {
				inst, err := d.instance()
				if err == nil {
					info.Hosts = append(info.Hosts, inst)
				}
				return err
			})
		default:
			err = d.skip()
		}
		return err
	})
	return info, err
}

func (d *jsonDecoder) instance() (Instance, error) {
	var in Instance
	err := d.object(func(key string) error {
		var err error
		switch key {
		case "instanceId":
			in.InstanceID, err = d.str("instanceId", d.lim.MaxStringBytes)
		case "ip":
			in.IP, err = d.str("ip", d.lim.MaxStringBytes)
		case "port":
			err = d.scalar("port", &in.Port)
		case "weight":
			err = d.scalar("weight", &in.Weight)
		case "healthy":
			err = d.scalar("healthy", &in.Healthy)
		case "enabled":
			err = d.scalar("enabled", &in.Enabled)
		case "ephemeral":
			err = d.scalar("ephemeral", &in.Ephemeral)
		case "clusterName":
			in.ClusterName, err = d.str("clusterName", d.lim.MaxStringBytes)
		case "serviceName":
			in.ServiceName, err = d.str("serviceName", d.lim.MaxStringBytes)
		case "metadata":
			err = d.metadata(&in)
		default:
			err = d.skip()
		}
		return err
	})
	return in, err
}

func (d *jsonDecoder) metadata(in *Instance) error {
	return d.object(func(key string) error {
		if len(key) > d.lim.MaxKeyBytes {
			return d.fail(nil, "metadata key longer than %d bytes", d.lim.MaxKeyBytes)
		}
		if in.Metadata == nil {
			in.Metadata = make(map[string]string)
		}
		if _, dup := in.Metadata[key]; !dup && len(in.Metadata) >= d.lim.MaxMetadataEntries {
			return d.fail(nil, "more than %d metadata entries in an instance", d.lim.MaxMetadataEntries)
		}
		v, err := d.str("metadata value", d.lim.MaxValueBytes)
		if err != nil {
			return err
		}
		in.Metadata[key] = v
		return nil
	})
}

// response reads a response object: the shared fields into r, any other key to field (which
// must consume its value; nil skips them all).
func (d *jsonDecoder) response(r *response, field func(key string) error) error {
	return d.object(func(key string) error {
		var err error
		switch key {
		case "resultCode":
			err = d.scalar("resultCode", &r.ResultCode)
		case "errorCode":
			err = d.scalar("errorCode", &r.ErrorCode)
		case "message":
			// The message is the server's; it is cut when it becomes an error.
			err = d.scalar("message", &r.Message)
		case "requestId":
			r.RequestID, err = d.str("requestId", d.lim.MaxStringBytes)
		case "success":
			err = d.scalar("success", &r.Success)
		default:
			if field == nil {
				return d.skip()
			}
			err = field(key)
		}
		return err
	})
}

// decodeResponse decodes a response body whose extra fields field reads, and turns a failed
// response into a *ServerError.
func decodeResponse(body []byte, what string, lim Limits, field func(d *jsonDecoder, key string) error) error {
	d := newJSONDecoder(body, what, lim)
	var r response
	var f func(string) error
	if field != nil {
		f = func(key string) error { return field(d, key) }
	}
	err := d.response(&r, f)
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return err
	}
	return r.err()
}

// err is the ServerError a failed response stands for, nil for success.
func (r *response) err() error {
	if r.ResultCode == resultSuccess {
		return nil
	}
	code := r.ErrorCode
	if code == 0 {
		code = r.ResultCode
	}
	return NewServerError(code, r.Message)
}

// decodeSubscribeResponse decodes SubscribeServiceResponse {serviceInfo} (also
// QueryServiceResponse's shape).
func decodeSubscribeResponse(body []byte, lim Limits) (*ServiceInfo, error) {
	var info *ServiceInfo
	err := decodeResponse(body, typeSubscribeServiceResponse, lim, func(d *jsonDecoder, key string) error {
		if key != "serviceInfo" {
			return d.skip()
		}
		var err error
		info, err = d.serviceInfo()
		return err
	})
	if err != nil {
		return nil, err
	}
	if info == nil {
		return nil, decodeErr(typeSubscribeServiceResponse, nil, "no serviceInfo")
	}
	return info, nil
}

// decodeServiceListResponse decodes ServiceListResponse {count, serviceNames}.
func decodeServiceListResponse(body []byte, lim Limits) (ServicePage, error) {
	var page ServicePage
	err := decodeResponse(body, typeServiceListResponse, lim, func(d *jsonDecoder, key string) error {
		switch key {
		case "count":
			return d.scalar("count", &page.Count)
		case "serviceNames":
			page.Names = page.Names[:0]
			return d.array("service names", d.lim.MaxServiceNames, func() error {
				name, err := d.str("service name", d.lim.MaxStringBytes)
				if err == nil {
					page.Names = append(page.Names, name)
				}
				return err
			})
		}
		return d.skip()
	})
	if err != nil {
		return ServicePage{}, err
	}
	if page.Count < 0 {
		return ServicePage{}, decodeErr(typeServiceListResponse, nil, "negative count")
	}
	return page, nil
}

// decodeServerCheckResponse decodes ServerCheckResponse {connectionId}.
func decodeServerCheckResponse(body []byte, lim Limits) (string, error) {
	var id string
	err := decodeResponse(body, typeServerCheckResponse, lim, func(d *jsonDecoder, key string) error {
		if key != "connectionId" {
			return d.skip()
		}
		var err error
		id, err = d.str("connectionId", d.lim.MaxStringBytes)
		return err
	})
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", decodeErr(typeServerCheckResponse, nil, "no connectionId")
	}
	return id, nil
}

// decodePushHeader reads the request ID (and, for naming requests, the service) of a request
// the server pushed, skipping the rest.
func decodePushHeader(body []byte, what string, lim Limits) (pushHeader, error) {
	var h pushHeader
	d := newJSONDecoder(body, what, lim)
	err := d.object(func(key string) error {
		var err error
		switch key {
		case "requestId":
			h.RequestID, err = d.str("requestId", d.lim.MaxStringBytes)
		case "namespace":
			h.Namespace, err = d.str("namespace", d.lim.MaxStringBytes)
		case "serviceName":
			h.ServiceName, err = d.str("serviceName", d.lim.MaxStringBytes)
		case "groupName":
			h.GroupName, err = d.str("groupName", d.lim.MaxStringBytes)
		default:
			err = d.skip()
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	return h, err
}

// decodeNotifySubscriber decodes NotifySubscriberRequest {requestId, namespace, serviceName,
// groupName, serviceInfo} into its request ID, the service it is about and its new state.
func decodeNotifySubscriber(body []byte, lim Limits) (requestID string, ref Ref, info *ServiceInfo, err error) {
	var h pushHeader
	d := newJSONDecoder(body, typeNotifySubscriberRequest, lim)
	err = d.object(func(key string) error {
		var err error
		switch key {
		case "requestId":
			h.RequestID, err = d.str("requestId", d.lim.MaxStringBytes)
		case "namespace":
			h.Namespace, err = d.str("namespace", d.lim.MaxStringBytes)
		case "serviceName":
			h.ServiceName, err = d.str("serviceName", d.lim.MaxStringBytes)
		case "groupName":
			h.GroupName, err = d.str("groupName", d.lim.MaxStringBytes)
		case "serviceInfo":
			info, err = d.serviceInfo()
		default:
			err = d.skip()
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return "", Ref{}, nil, err
	}
	if info == nil {
		return h.RequestID, Ref{}, nil, decodeErr(typeNotifySubscriberRequest, nil, "no serviceInfo")
	}
	ref = pushRef(h, info)
	if ref.Service == "" {
		return h.RequestID, Ref{}, nil, decodeErr(typeNotifySubscriberRequest, nil, "no service name")
	}
	return h.RequestID, ref, info, nil
}

// pushRef names the service of a push: the request's own fields (Nacos and Polaris set them),
// else the serviceInfo's, whose name may be "group@@name". The default namespace's ID "public"
// is Ref's "".
func pushRef(h pushHeader, info *ServiceInfo) Ref {
	ref := Ref{Namespace: h.Namespace, Group: h.GroupName, Service: h.ServiceName}
	if ref.Service == "" {
		ref.Service = info.Name
		if ref.Group == "" {
			ref.Group = info.GroupName
		}
	}
	if g, name, ok := strings.Cut(ref.Service, "@@"); ok {
		if ref.Group == "" {
			ref.Group = g
		}
		ref.Service = name
	}
	if ref.Namespace == defaultNamespaceID {
		ref.Namespace = ""
	}
	if ref.Group == "" {
		ref.Group = defaultGroup
	}
	return ref
}
