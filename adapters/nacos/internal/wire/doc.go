// Package wire is the Nacos adapter's protocol layer: it speaks both APIs of a Nacos server, or
// of a server that serves them (PolarisMesh's service-nacos apiserver), directly.
//
//   - grpc.go is a Nacos 2 gRPC client (Dial, Conn): the connection handshake
//     (ServerCheckRequest, the bi-stream and its ConnectionSetupRequest), SubscribeServiceRequest
//     and ServiceListRequest, the answers to what the server pushes on the bi-stream
//     (NotifySubscriberRequest, ClientDetectionRequest, ConnectResetRequest) and a health check
//     every 5 s, as Nacos's own clients do. A lost connection closes Conn.Done with the reason; the
//     caller reconnects. payload.go is its message codec; requests.go the JSON bodies.
//   - http.go, udp.go and auth.go are the Nacos 1 HTTP OpenAPI client, its UDP push receiver and
//     the login and AK/SK signing both APIs use.
//   - decode.go decodes what both APIs answer (a service's instances, a page of service names)
//     within Limits: an answer beyond a limit is an error naming it, never truncated. It walks
//     the JSON value by value with jsonlex.go's reader, which accepts what encoding/json
//     accepts (a fuzz target compares them) at a sixth of the cost (docs/benchmarks.md).
//
// Errors keep "the server answered no" (*ServerError) apart from "no answer" (any other error)
// and from "an answer we cannot accept" (*DecodeError); none of them holds a body, a token or a
// signature.
//
// No generated protobuf code. Nacos's nacos_grpc_service.proto has no proto package, so code
// generated from it registers the global protobuf names "Payload" and "Metadata", which clash
// (a registration conflict at init) with the same registration by the official Go client
// (nacos-sdk-go api/grpc) in any binary that links both, as Galleon's test module does. The two
// messages are small: payload.go encodes and decodes them with
// google.golang.org/protobuf/encoding/protowire in about 200 lines, bounded (header count and
// sizes, UTF-8, no groups) and fuzzed (fuzz_test.go), and checked against the protobuf module's
// own encoder on a descriptor of the same proto (payload_test.go) and against payloads captured
// from polaris-server (testdata/polaris). The gRPC codec is passed per call (grpc.ForceCodec),
// never registered.
//
// Not github.com/nacos-group/nacos-sdk-go/v2 (read at v2.3.2). It is the official client, but
// it fails the bar every Galleon adapter meets (bounded memory, cancellation, no global state or
// log files, no disk written where we did not ask, testable):
//   - common/logger/logger.go holds one package-global logger (SetLogger, GetLogger) that every
//     client shares; by default it writes rolling log files (lumberjack) under
//     ClientConfig.LogDir, the current directory when unset.
//   - clients/naming_client/naming_cache/service_info_holder.go writes every service it receives
//     to files under ClientConfig.CacheDir (the current directory when unset) and reads them back
//     at start unless NotLoadCacheAtStart: a stale registry served after a restart is exactly
//     what the adapter must not do.
//   - common/monitor/monitor.go registers its Prometheus collectors in the global registry at
//     init (prometheus.MustRegister).
//   - Its requests are bounded by a millisecond timeout, not a context (common/remote/rpc
//     grpc_connection.go request uses context.Background()), its reconnect loop and health check
//     run in goroutines only Shutdown stops, its inbound message bound comes from an
//     environment variable (grpc_client.go getMaxCallRecvMsgSize), nothing bounds what it
//     decodes, and a failed request is logged with its body (rpc_client.go waitReconnect).
//   - Its success test reads the "success" field (rpc_response.go IsSuccess), which Polaris
//     leaves false in a successful SubscribeServiceResponse.
//   - Its go.mod pulls Alibaba Cloud KMS SDKs (alibabacloud-go/kms-20160120,
//     aliyun/alibabacloud-dkms-gcs-go-sdk, aliyun/alibaba-cloud-sdk-go, ...) for config
//     encryption, Prometheus, zap and lumberjack into every binary that imports it.
//
// So the adapter speaks the protocol directly, as the Eureka adapter does. The official client
// still serves, in the test module, as the independent writer a Nacos user's applications are.
//
// It is internal: only the adapter reads Nacos's wire format.
package wire
