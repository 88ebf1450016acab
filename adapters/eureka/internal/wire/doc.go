// Package wire is the Eureka adapter's registry-independent core, what a Eureka client reads:
//
//   - wire.go (with json.go and xml.go) decodes the listings a Eureka server answers
//     GET <base>/apps and GET <base>/apps/delta with, in JSON and in XML (Eureka's default), into
//     plain Go types (Applications, Application, Instance). It takes every spelling a client
//     meets: Netflix's Jackson codec (the server's default JSON), Netflix's older XStream JSON
//     (every value a string, one element an object instead of an array), Netflix's XStream XML
//     (the server's default XML, element names escaped) and Polaris's Eureka API (booleans,
//     nulls, extra metadata). An instance that cannot be served is skipped with a reason
//     (reasons.go), the rest decodes.
//   - hashcode.go computes apps__hashcode by Eureka's rule, which is how a client knows that its
//     copy of the registry still matches the server's.
//   - delta.go applies a delta (ADDED, MODIFIED, DELETED) to a registry as a pure function and
//     says whether the result reconciles with the server's hashcode and which applications
//     changed; Diff compares two registries the same way.
//
// github.com/ArthurHlt/go-eureka-client (v1.1.0) was the SDK the issue asked for where it fits. It
// does not fit here: it fetches and decodes XML only (its JSON tags cannot read Netflix's
// "@enabled": "true" into their bool, nor the old XStream JSON's "$": "8080" into their int, and
// its metadata JSON decoder passes a map by value, so it always fails), reads metadata XML with
// a regular expression (entities stay escaped, empty values are dropped, XStream's escaped names
// stay escaped), does not read Polaris's <overriddenStatus>, has no delta, no hashcode and no
// body limit (ioutil.ReadAll), and logs through logrus. Its XML types serve the tests as an
// independent cross-check of this decoder (sdk_test.go), which also pins those shortcomings.
//
// It is internal: only the adapter reads Eureka's wire format, so none of it is the adapter's
// exported surface.
package wire
