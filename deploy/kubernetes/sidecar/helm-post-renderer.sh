#!/bin/sh
# Helm post-renderer that adds the galleon-file sidecar to istiod whenever
# istiod's chart is installed or upgraded, so an upgrade keeps it:
#
#   helm upgrade --install istiod istio/istiod -n istio-system -f your-values.yaml \
#     --post-renderer deploy/kubernetes/sidecar/helm-post-renderer.sh
#
# Reads the rendered manifests on stdin, applies istiod-patch.yaml (next to
# this script) to the Deployment istiod with kustomize, writes the result to
# stdout. Needs kubectl (its built-in kustomize) on PATH.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/all.yaml"
cp "$here/istiod-patch.yaml" "$work/istiod-patch.yaml"
cat >"$work/kustomization.yaml" <<'KUSTOMIZATION'
resources:
- all.yaml
patches:
- path: istiod-patch.yaml
  target:
    kind: Deployment
    name: istiod
KUSTOMIZATION
kubectl kustomize "$work"
