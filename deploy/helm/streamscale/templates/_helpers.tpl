{{/* Names: <release>-streamscale unless the release name holds the chart's name. */}}
{{- define "streamscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "streamscale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "streamscale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "streamscale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "streamscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The driver pod's labels (the Services select it by these, never the executor pods). */}}
{{- define "streamscale.driverSelectorLabels" -}}
{{ include "streamscale.selectorLabels" . }}
app.kubernetes.io/component: driver
{{- end }}

{{- define "streamscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "streamscale.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "streamscale.image" -}}
{{- $repository := required "image.repository is required: an image with streamscale installed (see deploy/docker/)" .Values.image.repository }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "streamscale.executorImage" -}}
{{- default (include "streamscale.image" .) .Values.executorImage }}
{{- end }}

{{/* The headless Service executors reach the driver through, and its DNS name. */}}
{{- define "streamscale.driverService" -}}
{{- printf "%s-driver" (include "streamscale.fullname" .) }}
{{- end }}

{{- define "streamscale.driverHost" -}}
{{- if eq .Values.spark.driverAddress "podIP" }}
{{- print "$(POD_IP)" }}
{{- else }}
{{- printf "%s.%s.svc" (include "streamscale.driverService" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{- define "streamscale.metricsService" -}}
{{- printf "%s-metrics" (include "streamscale.fullname" .) }}
{{- end }}

{{/* The label matchers of the alerts: this release's driver pods, as scraped. */}}
{{- define "streamscale.metricsSelector" -}}
{{- if .Values.prometheusRule.selector }}
{{- .Values.prometheusRule.selector }}
{{- else }}
{{- printf "namespace=\"%s\",pod=~\"%s-.*\"" .Release.Namespace (include "streamscale.fullname" .) }}
{{- end }}
{{- end }}
