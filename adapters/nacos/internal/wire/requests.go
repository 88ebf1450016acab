package wire

// The JSON bodies of the requests and responses this client exchanges. Field names are those of
// Nacos's Java classes (com.alibaba.nacos.api.remote.request.*, ...naming.remote.request.*) as
// Jackson writes them, which Polaris mirrors in apiserver/nacosserver/v2/pb/*.go. Headers travel
// in Payload.Metadata.headers, never in the body (nacos-sdk-go rpc_request.Request: Headers is
// `json:"-"`; Polaris reads only Metadata.headers: v2/access.go injectPayloadHeader).

// Request type names (Metadata.type): the Java simple class names.
const (
	typeServerCheckRequest      = "ServerCheckRequest"
	typeConnectionSetupRequest  = "ConnectionSetupRequest"
	typeHealthCheckRequest      = "HealthCheckRequest"
	typeSubscribeServiceRequest = "SubscribeServiceRequest"
	typeServiceListRequest      = "ServiceListRequest"
	typeNotifySubscriberRequest = "NotifySubscriberRequest"
	typeClientDetectionRequest  = "ClientDetectionRequest"
	typeConnectResetRequest     = "ConnectResetRequest"

	typeServerCheckResponse      = "ServerCheckResponse"
	typeHealthCheckResponse      = "HealthCheckResponse"
	typeSubscribeServiceResponse = "SubscribeServiceResponse"
	typeServiceListResponse      = "ServiceListResponse"
	typeNotifySubscriberResponse = "NotifySubscriberResponse"
	typeClientDetectionResponse  = "ClientDetectionResponse"
	typeConnectResetResponse     = "ConnectResetResponse"
	typeErrorResponse            = "ErrorResponse"
)

// Nacos's ResponseCode: resultCode is 200 or 500. Java's Response.isSuccess compares resultCode
// with 200; nacos-sdk-go reads the "success" field (rpc_response.go IsSuccess), which Polaris
// leaves false in a successful SubscribeServiceResponse (v2/discover/subscribe.go
// handleSubscribeServiceReques): only resultCode is read here.
const (
	resultSuccess = 200
	resultFail    = 500

	// errorCode 301 (NacosException.UN_REGISTER): Nacos answers it to requests on a connection
	// whose ConnectionSetupRequest it has not processed yet.
	errorUnregistered = 301
	// errorCode 400 (NacosException.CLIENT_INVALID_PARAM), answered to a push we cannot read.
	errorClientInvalid = 400
	// errorCode 403 (NacosException.NO_RIGHT): the access token was refused.
	errorNoRight = 403
	// errorCode 500 (NacosException.SERVER_ERROR), used for gRPC-level errors of an answered call.
	errorServer = 500
)

// defaultNamespaceID is the ID Nacos 2 gives the default namespace; Ref.Namespace "" maps to it.
// Polaris's store keys services by it too (core/storage.go ListInstances uses
// ToNacosNamespace), so a subscription to namespace "" would find nothing there.
const defaultNamespaceID = "public"

// defaultGroup is Nacos's group of a service registered without one.
const defaultGroup = "DEFAULT_GROUP"

type baseRequest struct {
	RequestID string `json:"requestId"`
}

type namingRequest struct {
	baseRequest
	Namespace   string `json:"namespace"`
	ServiceName string `json:"serviceName"`
	GroupName   string `json:"groupName"`
	Module      string `json:"module"`
}

type subscribeServiceRequest struct {
	namingRequest
	Subscribe bool   `json:"subscribe"`
	Clusters  string `json:"clusters"`
}

type serviceListRequest struct {
	namingRequest
	PageNo   int    `json:"pageNo"`
	PageSize int    `json:"pageSize"`
	Selector string `json:"selector"`
}

type connectionSetupRequest struct {
	baseRequest
	ClientVersion   string            `json:"clientVersion"`
	Tenant          string            `json:"tenant"`
	Labels          map[string]string `json:"labels"`
	ClientAbilities clientAbilities   `json:"clientAbilities"`
	Module          string            `json:"module"`
}

// clientAbilities is Nacos 2.0-2.2's ClientAbilities (2.3 adds an abilityTable that servers
// treat as optional). Galleon supports neither delta push nor remote metrics.
type clientAbilities struct {
	RemoteAbility struct {
		SupportRemoteConnection bool `json:"supportRemoteConnection"`
	} `json:"remoteAbility"`
	ConfigAbility struct {
		SupportRemoteMetrics bool `json:"supportRemoteMetrics"`
	} `json:"configAbility"`
	NamingAbility struct {
		SupportDeltaPush    bool `json:"supportDeltaPush"`
		SupportRemoteMetric bool `json:"supportRemoteMetric"`
	} `json:"namingAbility"`
}

// response is the part every response shares (com.alibaba.nacos.api.remote.response.Response).
type response struct {
	ResultCode int    `json:"resultCode"`
	ErrorCode  int    `json:"errorCode"`
	Message    string `json:"message"`
	RequestID  string `json:"requestId"`
	Success    bool   `json:"success"`
}

type serverCheckResponse struct {
	response
	ConnectionID string `json:"connectionId"`
}

// pushHeader is what this client reads of a request the server pushes on the bi-stream
// before deciding what it is; NotifySubscriberRequest's serviceInfo is decoded by decode.go.
type pushHeader struct {
	RequestID   string `json:"requestId"`
	Namespace   string `json:"namespace"`
	ServiceName string `json:"serviceName"`
	GroupName   string `json:"groupName"`
}
