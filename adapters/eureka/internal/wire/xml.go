package wire

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The XML listing (Eureka's default): <applications><versions__delta>1</versions__delta>
// <apps__hashcode>UP_2_</apps__hashcode><application><name>APP</name><instance>...</instance>
// </application></applications>, as Netflix's XStream codec (the server's default) and Polaris
// write it.

// xmlInstance is one <instance> element.
type xmlInstance struct {
	InstanceID       string `xml:"instanceId"`
	App              string `xml:"app"`
	IPAddr           string `xml:"ipAddr"`
	HostName         string `xml:"hostName"`
	Status           string `xml:"status"`
	OverriddenStatus string `xml:"overriddenstatus"` // Netflix's XStream
	// Polaris; Netflix's XStream reader takes it too.
	OverriddenStatusAlt string   `xml:"overriddenStatus"`
	Port                *xmlPort `xml:"port"`
	SecurePort          *xmlPort `xml:"securePort"`
	VIPAddress          string   `xml:"vipAddress"`
	SecureVIPAddress    string   `xml:"secureVipAddress"`
	Metadata            xmlMap   `xml:"metadata"`
	DataCenterInfo      struct {
		Class    string `xml:"class,attr"`
		Name     string `xml:"name"`
		Metadata xmlMap `xml:"metadata"`
	} `xml:"dataCenterInfo"`
	LeaseInfo struct {
		RenewalIntervalInSecs string `xml:"renewalIntervalInSecs"`
		DurationInSecs        string `xml:"durationInSecs"`
		RegistrationTimestamp string `xml:"registrationTimestamp"`
		LastRenewalTimestamp  string `xml:"lastRenewalTimestamp"`
		EvictionTimestamp     string `xml:"evictionTimestamp"`
		ServiceUpTimestamp    string `xml:"serviceUpTimestamp"`
	} `xml:"leaseInfo"`
	LastUpdatedTimestamp string `xml:"lastUpdatedTimestamp"`
	LastDirtyTimestamp   string `xml:"lastDirtyTimestamp"`
	ActionType           string `xml:"actionType"`
}

type xmlPort struct {
	Number  string  `xml:",chardata"`
	Enabled *string `xml:"enabled,attr"`
}

// xmlMap is a map written as one element per entry, <metadata><key>value</key></metadata>.
type xmlMap struct {
	Entries []struct {
		XMLName xml.Name
		Value   string `xml:",chardata"`
	} `xml:",any"`
}

// toMap decodes the keys the way XStream encoded them (see xstreamName); nil when empty.
func (m xmlMap) toMap() map[string]string {
	if len(m.Entries) == 0 {
		return nil
	}
	out := make(map[string]string, len(m.Entries))
	for _, e := range m.Entries {
		k := e.XMLName.Local
		if e.XMLName.Space != "" { // an undeclared prefix: the name as written
			k = e.XMLName.Space + ":" + k
		}
		out[xstreamName(k)] = e.Value
	}
	return out
}

// decodeXML reads the listing element by element and decodes each instance in one go, holding
// one application's instances at a time.
func decodeXML(body io.Reader, lim Limits) (*Applications, error) {
	dec := xml.NewDecoder(body)
	fail := func(err error) (*Applications, error) { return nil, fmt.Errorf("eureka: XML listing: %w", err) }
	var root xml.StartElement
	for {
		t, err := dec.Token()
		if err == io.EOF {
			return fail(errors.New("no <applications> element"))
		}
		if err != nil {
			return fail(err)
		}
		if se, ok := t.(xml.StartElement); ok {
			root = se
			break
		}
	}
	if root.Name.Local != "applications" {
		return fail(fmt.Errorf("the root element is <%s>, not <applications>", root.Name.Local))
	}
	as := newAssembler(lim)
	var scratch []rawInstance // one application's instances, reused
	for {
		t, err := dec.Token()
		if err != nil {
			return fail(err) // io.EOF too: </applications> is missing
		}
		var se xml.StartElement
		switch t := t.(type) {
		case xml.EndElement:
			return as.finish(), nil // </applications>: what follows is not read, as xml.Unmarshal
		case xml.StartElement:
			se = t
		default:
			continue
		}
		var v string
		switch se.Name.Local {
		case "versions__delta":
			err = dec.DecodeElement(&v, &se)
			as.versionsDelta(str(v))
		case "apps__hashcode":
			err = dec.DecodeElement(&v, &se)
			as.appsHashcode(str(v))
		case "application":
			if err = as.countApp(); err != nil {
				break
			}
			var name string
			name, scratch, err = decodeXMLApplication(dec, as, scratch[:0])
			if err == nil {
				as.add(strings.TrimSpace(name), scratch) // the instances listed before <name>, if any
			}
			clear(scratch)
		default:
			err = dec.Skip()
		}
		if err != nil {
			return fail(err)
		}
	}
}

// decodeXMLApplication reads one <application> (its start read): its name, and its instances,
// added to as one by one once the name is known, else appended to raws (see
// decodeJSONApplication).
func decodeXMLApplication(dec *xml.Decoder, as *assembler, raws []rawInstance) (string, []rawInstance, error) {
	var name string
	named, added := false, false
	for {
		t, err := dec.Token()
		if err != nil {
			return name, raws, err
		}
		switch t := t.(type) {
		case xml.EndElement:
			return name, raws, nil
		case xml.StartElement:
			switch t.Name.Local {
			case "name":
				if added {
					err = dec.Skip()
					break
				}
				name = ""
				err = dec.DecodeElement(&name, &t)
				named = true
			case "instance":
				if err = as.countInstance(); err != nil {
					break
				}
				var x xmlInstance
				if err = dec.DecodeElement(&x, &t); err != nil {
					break
				}
				in := x.raw()
				if named {
					as.addOne(strings.TrimSpace(name), &in)
					added = true
				} else {
					raws = append(raws, in)
				}
			default:
				err = dec.Skip()
			}
			if err != nil {
				return name, raws, err
			}
		}
	}
}

func (x *xmlInstance) raw() rawInstance {
	return rawInstance{
		InstanceID: str(x.InstanceID), App: str(x.App), IPAddr: str(x.IPAddr), HostName: str(x.HostName),
		Status: str(x.Status), OverriddenStatus: str(x.OverriddenStatusAlt), OverriddenStatusLegacy: str(x.OverriddenStatus),
		Port: x.Port.raw(), SecurePort: x.SecurePort.raw(),
		VIPAddress: str(x.VIPAddress), SecureVIPAddress: str(x.SecureVIPAddress),
		Metadata: x.Metadata.toMap(),
		DataCenterInfo: rawDataCenter{
			Class: str(x.DataCenterInfo.Class), Name: str(x.DataCenterInfo.Name), Metadata: x.DataCenterInfo.Metadata.toMap(),
		},
		LeaseInfo: rawLease{
			RenewalIntervalInSecs: str(x.LeaseInfo.RenewalIntervalInSecs), DurationInSecs: str(x.LeaseInfo.DurationInSecs),
			RegistrationTimestamp: str(x.LeaseInfo.RegistrationTimestamp), LastRenewalTimestamp: str(x.LeaseInfo.LastRenewalTimestamp),
			EvictionTimestamp: str(x.LeaseInfo.EvictionTimestamp), ServiceUpTimestamp: str(x.LeaseInfo.ServiceUpTimestamp),
		},
		LastUpdatedTimestamp: str(x.LastUpdatedTimestamp), LastDirtyTimestamp: str(x.LastDirtyTimestamp),
		ActionType: str(x.ActionType),
	}
}

func (p *xmlPort) raw() rawPort {
	if p == nil {
		return rawPort{}
	}
	r := rawPort{Number: scalar{s: p.Number, set: true}, set: true}
	if p.Enabled != nil {
		r.Enabled = scalar{s: *p.Enabled, set: true}
	}
	return r
}

// xstreamName undoes XStream's XmlFriendlyNameCoder, which Netflix's server uses for XML (its
// default XML codec, XStreamXml): in element names '$' is written "_-", '_' is written "__",
// and a character not allowed in an XML name "_." and four hex digits. That is why the listing
// says versions__delta, and why a metadata key instance_name arrives as <instance__name>.
// Polaris writes metadata keys unescaped: "a_b" decodes to itself, but a Polaris key with "__"
// or "_-" in it reads back changed (JSON has no such ambiguity), and one with a character not
// allowed in XML names ('$', a space) makes its whole XML listing malformed.
func xstreamName(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "_-"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "_.") && len(s) >= i+6:
			if n, err := strconv.ParseUint(s[i+2:i+6], 16, 16); err == nil {
				b.WriteRune(rune(n))
				i += 5
				continue
			}
			b.WriteByte('_')
		case strings.HasPrefix(s[i:], "__"):
			b.WriteByte('_')
			i++
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
