{{/* Chart name: nameOverride, else the adapter's name (galleon-file). */}}
{{- define "galleon.name" -}}
{{- default .Values.adapter.name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Resource names and the Service's DNS name: fullnameOverride; else the release
name if it contains the adapter's name ("helm install galleon-file" gives
galleon-file); else <release>-<adapter>.
*/}}
{{- define "galleon.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "galleon.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "galleon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "galleon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "galleon.labels" -}}
{{ include "galleon.selectorLabels" . }}
app.kubernetes.io/part-of: galleon
app.kubernetes.io/component: adapter
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "galleon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "galleon.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "galleon.image" -}}
{{- $repo := default .Values.adapter.name .Values.image.repository -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* The registry ConfigMap's name, or "" when no directory is mounted. */}}
{{- define "galleon.registryConfigMap" -}}
{{- if .Values.registry.existingConfigMap -}}
{{- .Values.registry.existingConfigMap -}}
{{- else if .Values.registry.files -}}
{{- printf "%s-registry" (include "galleon.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The fleet's registry list ConfigMap, or "" unless the adapter is galleon-fleet with a list. */}}
{{- define "galleon.fleetConfigMap" -}}
{{- if eq .Values.adapter.name "galleon-fleet" -}}
{{- if .Values.fleet.existingConfigMap -}}
{{- .Values.fleet.existingConfigMap -}}
{{- else if .Values.fleet.registries -}}
{{- printf "%s-registries" (include "galleon.fullname" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
galleon.shardPorts: the shard listeners' ports, one per shard, as a list
(empty when shards.count is 0).
*/}}
{{- define "galleon.shardPorts" -}}
{{- $ports := list -}}
{{- range $i := until (int .Values.shards.count) -}}
{{- $ports = append $ports (add (int $.Values.shards.firstPort) $i) -}}
{{- end -}}
{{- toJson $ports -}}
{{- end }}
