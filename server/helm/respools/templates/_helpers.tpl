{{/* The release's base name: "respools" for a release called respools, else <release>-respools. */}}
{{- define "respools.fullname" -}}
{{- if contains "respools" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-respools" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "respools.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels on every object; selectorLabels never change between upgrades. */}}
{{- define "respools.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/name: respools
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/part-of: respools
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{- define "respools.selectorLabels" -}}
app.kubernetes.io/name: respools
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* The Secret and key that hold the database URL. */}}
{{- define "respools.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecret }}{{- else -}}{{ include "respools.fullname" . }}-database{{- end -}}
{{- end -}}
{{- define "respools.databaseSecretKey" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecretKey }}{{- else -}}database-url{{- end -}}
{{- end -}}

{{- define "respools.adminTokenSecret" -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.existingSecret }}{{- else -}}{{ include "respools.fullname" . }}-admin-token{{- end -}}
{{- end -}}

{{/* The service's URL inside the cluster, for the controller and the definitions Job. */}}
{{- define "respools.url" -}}
{{- printf "http://%s.%s.svc:%d" (include "respools.fullname" .) .Release.Namespace (int .Values.server.service.port) -}}
{{- end -}}

{{- define "respools.webhookService" -}}
{{- include "respools.fullname" . }}-controller-webhook
{{- end -}}

{{/* certManager or selfSigned: which makes the webhook's certificate. */}}
{{- define "respools.certificateMode" -}}
{{- $mode := .Values.webhook.certificate.mode -}}
{{- if eq $mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}certManager{{- else -}}selfSigned{{- end -}}
{{- else -}}{{ $mode }}{{- end -}}
{{- end -}}

{{/* Exactly one source for the database: a URL, a Secret of yours, or the bundled PostgreSQL. */}}
{{- define "respools.checkDatabase" -}}
{{- $sources := 0 -}}
{{- if .Values.database.url }}{{ $sources = add1 $sources }}{{ end -}}
{{- if .Values.database.existingSecret }}{{ $sources = add1 $sources }}{{ end -}}
{{- if .Values.postgresql.enabled }}{{ $sources = add1 $sources }}{{ end -}}
{{- if ne (int $sources) 1 -}}
{{- fail "respools: set exactly one of database.url, database.existingSecret or postgresql.enabled=true" -}}
{{- end -}}
{{- end -}}
