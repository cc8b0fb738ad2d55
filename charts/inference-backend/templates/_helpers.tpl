{{/*
The usual helpers (as `helm create` writes them, and cert-manager, kube-prometheus-stack and KubeRay use them):
every template names and labels its objects through these.
*/}}

{{/* The chart's name, or nameOverride. */}}
{{- define "ib.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' base name: fullnameOverride, else the release name when it already holds the chart's name, else
<release>-<name>; at most 63 characters (a DNS label).
*/}}
{{- define "ib.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* name-version, the helm.sh/chart label. */}}
{{- define "ib.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* What a Deployment selects its pods by (never changes across upgrades). */}}
{{- define "ib.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ib.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object the chart renders. */}}
{{- define "ib.labels" -}}
helm.sh/chart: {{ include "ib.chart" . }}
{{ include "ib.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: inference-backend
{{- end -}}

{{/*
The ServiceAccount the operator runs as (and the RBAC binds): serviceAccount.name, else the fullname, whether the
chart creates it (serviceAccount.create) or it is made elsewhere.
*/}}
{{- define "ib.serviceAccountName" -}}
{{- default (include "ib.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
A repository with its registry host replaced by `registry` (the operator's images.py does the same to the images
it renders): the first path component is a host when it has a dot or a port or is localhost.
Called with (list repository registry).
*/}}
{{- define "ib.mirrored" -}}
{{- $repository := index . 0 -}}
{{- $registry := index . 1 | trimSuffix "/" -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repository -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $parts = rest $parts -}}
{{- end -}}
{{- printf "%s/%s" $registry (join "/" $parts) -}}
{{- else -}}
{{- $repository -}}
{{- end -}}
{{- end -}}

{{/*
The operator's image: image.repository, its registry host replaced by global.imageRegistry or else image.registry,
pinned by image.digest (repo@sha256:...) or tagged with image.tag (default: the chart's appVersion).
*/}}
{{- define "ib.image" -}}
{{- $registry := .Values.global.imageRegistry | default .Values.image.registry -}}
{{- $repository := include "ib.mirrored" (list .Values.image.repository $registry) -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Secret names from a list of names or {name: ...} objects (global.imagePullSecrets takes either form). */}}
{{- define "ib.secretNames" -}}
{{- $out := list -}}
{{- range . -}}
{{- if kindIs "string" . -}}
{{- $out = append $out . -}}
{{- else if .name -}}
{{- $out = append $out .name -}}
{{- end -}}
{{- end -}}
{{- $out | uniq | join "," -}}
{{- end -}}

{{/* The operator pod's imagePullSecrets: imagePullSecrets and global.imagePullSecrets, each name once. */}}
{{- define "ib.imagePullSecrets" -}}
{{- $names := include "ib.secretNames" (concat (.Values.imagePullSecrets | default list) (.Values.global.imagePullSecrets | default list)) -}}
{{- if $names }}
imagePullSecrets:
{{- range splitList "," $names }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* IB_IMAGE_OVERRIDES: engineImages without the empty fields, as JSON (the operator validates it at startup). */}}
{{- define "ib.engineImageOverrides" -}}
{{- $out := dict -}}
{{- range $key, $image := .Values.engineImages -}}
{{- $set := dict -}}
{{- range $field, $value := $image -}}
{{- if $value -}}{{- $_ := set $set $field $value -}}{{- end -}}
{{- end -}}
{{- if $set -}}{{- $_ := set $out $key $set -}}{{- end -}}
{{- end -}}
{{- if $out -}}{{- toJson $out -}}{{- end -}}
{{- end -}}

{{/* The names templates used before the standard ones above (kept for templates written against them). */}}
{{- define "ib.selector" -}}{{ include "ib.selectorLabels" . }}{{- end -}}
{{- define "ib.serviceAccount" -}}{{ include "ib.serviceAccountName" . }}{{- end -}}
