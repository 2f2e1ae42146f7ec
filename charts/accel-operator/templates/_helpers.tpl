{{/* The standard labels on every object; "component" names the part (operator, agent). */}}
{{- define "accel.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: accel-operator
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "accel.operatorLabels" -}}
{{ include "accel.labels" (dict "name" "accel-operator" "root" .) }}
{{- end -}}

{{- define "accel.agentLabels" -}}
{{ include "accel.labels" (dict "name" "accel-agent" "root" .) }}
{{- end -}}

{{- define "accel.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end -}}
