package xds

import "github.com/galleon-mesh/galleon/internal/serve"

// encodedMessage is a message already in wire form. A SotW response for a
// collection version is built once and its buffers handed to every stream;
// the codec of GRPCServerOptions (serve.Codec) writes them as they are.
type encodedMessage = serve.Message
