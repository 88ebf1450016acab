// Package file is a service registry kept as YAML files in one directory.
//
// It is Galleon's reference adapter and a real feature for fleets of VMs
// that have no registry: an operator (or a configuration-management tool,
// or a Kubernetes ConfigMap) writes the files, and the adapter reports the
// services in them.
//
// # Files
//
// Every regular file directly in the directory whose name ends in ".yaml"
// or ".yml" is read; sub-directories are not. Names starting with "." are
// ignored (dotfiles, Emacs ".#x" lock files, Vim ".x.swp" swap files,
// Kubernetes' "..data" links), and so is every name that does not end in
// .yaml/.yml (backups "x.yaml~", "x.yaml.swp", "#x.yaml#", temp files).
// A file may hold several YAML documents separated by "---".
//
// # Format
//
//	services:
//	- name: reviews                  # required; a DNS-1123 subdomain
//	  namespace: bookinfo            # optional; Config.Namespace ("default")
//	  hosts: [reviews.bookinfo.vm]   # optional; "<name>.<namespace>.internal"
//	  addresses: [240.0.0.10]        # optional virtual IPs or CIDRs
//	  ports:                         # at least one
//	  - number: 9080                 # required, 1-65535, unique
//	    protocol: HTTP               # optional; HTTP HTTPS HTTP2 GRPC TCP TLS
//	                                 # MONGO MYSQL REDIS UDP; default TCP
//	    name: http                   # optional; default "<protocol>-<number>"
//	  labels: {app: reviews}         # optional resource labels
//	  annotations: {}                # optional resource annotations
//	  location: internal             # internal (default) | external
//	  resolution: auto               # auto (default) | static | dns | none
//	  exportTo: []                   # optional; empty means every namespace
//	  instances:
//	  - address: 10.0.0.11           # required: an IP or a host name
//	    id: reviews-v1-a             # optional; default "<address>", or
//	                                 # "<address>:<port>" when ports remaps
//	                                 # (the instance port of the lowest
//	                                 # remapped service port)
//	    ports: {9080: 9081}          # optional service port -> instance port
//	    labels: {version: v1}        # optional endpoint labels
//	    locality: us-east1/us-east1-b  # optional region/zone/subzone
//	    network: ""                  # optional network name
//	    weight: 1                    # optional; 0 means the default
//	    health: healthy              # healthy (default) | unhealthy | draining
//	    serviceAccount: reviews      # optional workload identity
//
// Keys are parsed strictly: a key that is not listed above is an error.
// Enumerated values (protocol, location, resolution, health) are
// case-insensitive.
//
// # Errors
//
// Every problem is reported to Sink.Rejected with the record
// "<path>:<line>" and leaves the served state as safe as possible:
//   - A malformed file (YAML syntax, not a mapping, a top-level key other
//     than "services", "services" not a list) is rejected as a whole and
//     the last good content of that file stays in force. A file that was
//     never good contributes nothing.
//   - A malformed service in an otherwise good file is rejected alone; the
//     rest of the file counts. If the entry's namespace/name can still be
//     read and this file served that service before, its previous version
//     stays in force (a typo never removes a service from the mesh).
//   - The same namespace/name twice in one file: the first one counts.
//     In two files: the file whose name sorts first wins.
//
// A rejection is reported once, when it appears, not on every rescan; a
// resynchronisation from scratch (Replace) reports every rejection that
// still applies again.
//
// # Watching
//
// The directory is watched with fsnotify and re-scanned, after a 20 ms
// quiet period, on any event in it: this covers editors that save by
// writing a temp file and renaming it, and Kubernetes ConfigMap volumes,
// which swap a "..data" symlink. A periodic re-scan (Config.Resync) is a
// safety net for missed events. Only files whose content changed are parsed
// again, and only services whose model value changed are reported. If the
// directory disappears, Unreachable is reported and the last state is kept;
// the directory is polled every 250 ms until it is back, then the state is
// resynchronised with Replace and Unreachable(nil).
//
// # Code
//
// config.go holds Config and its checks, flags.go the command line
// (Config.AddFlags), registry.go New and Run. Run's loop is in watch.go
// (watchLoop: which event or timer causes which scan); a scan (scan.go)
// reads the files whose content changed and parses them in parallel;
// state.go merges what the files hold and decides what is reported, and
// when (removals are held, an empty directory is an outage); statedir.go
// keeps the last good contents in Config.StateDir. The file format is
// mapping.go (the schema and its mapping to model.Service), with the fast
// paths fastyaml.go and decode.go.
package file
