{{- define "ib.name" -}}inference-backend{{- end -}}
{{- define "ib.fullname" -}}
{{- if eq .Release.Name "inference-backend" -}}inference-backend{{- else -}}{{ printf "%s-inference-backend" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- define "ib.labels" -}}
app.kubernetes.io/name: {{ include "ib.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: inference-backend
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "ib.selector" -}}
app.kubernetes.io/name: {{ include "ib.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "ib.serviceAccount" -}}
{{- default (include "ib.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}
