{{/* Names and labels shared by every manifest. */}}
{{- define "tollgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tollgate.labels" -}}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tollgate.secretName" -}}
{{- .Values.existingSecret | default (include "tollgate.fullname" .) -}}
{{- end -}}

{{/*
tollgate.config is the configuration file: .Values.config, with the
scale-out sections added when clickhouse.url or redis.url is set. The URLs
themselves stay in the Secret; the file refers to them as ${VAR}.
*/}}
{{- define "tollgate.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if .Values.clickhouse.url -}}
{{- $store := dict -}}
{{- if hasKey $cfg "store" }}{{ $store = get $cfg "store" }}{{ end -}}
{{- $_ := set $store "backend" "clickhouse" -}}
{{- $_ := set $store "clickhouse" (dict "url" "${TOLLGATE_CLICKHOUSE_URL}" "database" .Values.clickhouse.database) -}}
{{- $_ := unset $store "sqlite" -}}
{{- $_ := set $cfg "store" $store -}}
{{- end -}}
{{- if .Values.redis.url -}}
{{- $quotas := dict -}}
{{- if hasKey $cfg "quotas" }}{{ $quotas = get $cfg "quotas" }}{{ end -}}
{{- $_ := set $quotas "redis" (dict "url" "${TOLLGATE_REDIS_URL}") -}}
{{- $_ := set $cfg "quotas" $quotas -}}
{{- $_ := set $cfg "replicas" (dict "redis" (dict "url" "${TOLLGATE_REDIS_URL}")) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
