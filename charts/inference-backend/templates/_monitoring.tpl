{{- /*
prometheus.io/* annotations of the operator's pods: for annotation discovery (the Prometheus example's
kubernetes-pods job), unless the ServiceMonitor scrapes the operator (one scrape path per target).
*/ -}}
{{- define "ib.operatorScrapeAnnotations" -}}
{{- if and .Values.metrics.podAnnotations (not .Values.monitoring.serviceMonitor.enabled) -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}
{{- /* Refuse the values that would scrape the operator twice: annotated pods and an annotated Service. */ -}}
{{- define "ib.checkScrapePaths" -}}
{{- $svc := .Values.metrics.service.annotations | default dict -}}
{{- if and .Values.metrics.service.enabled (eq (toString (index $svc "prometheus.io/scrape")) "true") (include "ib.operatorScrapeAnnotations" .) -}}
{{- fail "metrics.service.annotations has prometheus.io/scrape \"true\" while metrics.podAnnotations annotates the operator's pods: annotation discovery would scrape the operator twice (through its pods and through the Service's endpoints); set metrics.podAnnotations=false or drop the Service's annotation (docs/observability.md)" -}}
{{- end -}}
{{- end -}}
