package wire

import "context"

// The writes of a Nacos 2 client: an InstanceRequest (com.alibaba.nacos.api.naming.remote.
// request.InstanceRequest) registers or deregisters one ephemeral instance, which the server
// binds to the connection that sent it (Polaris: v2/discover/instance.go
// handleInstanceRequest, the instance's metadata holding the connection ID; Nacos:
// InstanceRequestHandler with EphemeralClientOperationServiceImpl). Galleon's adapter never
// writes; test harnesses and the load generator do, over this Conn, so that there is one
// client of the protocol.

const (
	typeInstanceRequest  = "InstanceRequest"
	typeInstanceResponse = "InstanceResponse"

	// The InstanceRequest types (NamingRemoteConstants.REGISTER_INSTANCE,
	// DE_REGISTER_INSTANCE); Polaris knows these two (handleInstanceRequest).
	instanceRegister   = "registerInstance"
	instanceDeregister = "deregisterInstance"
)

type instanceRequest struct {
	namingRequest
	Type     string   `json:"type"`
	Instance Instance `json:"instance"`
}

// RegisterInstance registers in as an ephemeral instance of ref held by this connection: the
// server drops it when the connection ends. An instance at the same IP, port and cluster is
// replaced, every field. in.ServiceName is set to ref.Service, in.Ephemeral to true, a nil
// Metadata to an empty one (Polaris refuses none).
func (c *Conn) RegisterInstance(ctx context.Context, ref Ref, in Instance) error {
	return c.instance(ctx, instanceRegister, ref, in)
}

// DeregisterInstance removes the instance of ref at in's IP, port and cluster.
func (c *Conn) DeregisterInstance(ctx context.Context, ref Ref, in Instance) error {
	return c.instance(ctx, instanceDeregister, ref, in)
}

func (c *Conn) instance(ctx context.Context, op string, ref Ref, in Instance) error {
	in.ServiceName, in.Ephemeral = ref.Service, true
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	req := instanceRequest{namingRequest: c.namingRequest(ref), Type: op, Instance: in}
	return c.call(ctx, typeInstanceRequest, req, ref, true, func(body []byte) error {
		return decodeResponse(body, typeInstanceResponse, c.cfg.Limits, nil)
	})
}
