{{/* The chart's name, "portico" unless overridden. */}}
{{- define "portico.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: the release's name when it contains the chart's
("portico" for a release called portico, as in deploy/), else both.
*/}}
{{- define "portico.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "portico.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Selector labels: never change them after install (selectors are immutable). */}}
{{- define "portico.selectorLabels" -}}
app.kubernetes.io/name: {{ include "portico.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "portico.labels" -}}
{{ include "portico.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "portico.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}
{{- end }}

{{/* "true" when the chart's GatewayClass gives each Gateway a data plane of its own (mode PerGateway), else empty. */}}
{{- define "portico.perGateway" -}}
{{- if and .Values.gatewayClass.create (eq .Values.gatewayClass.mode "PerGateway") }}true{{ end }}
{{- end }}

{{/*
Whether the chart renders the Service in front of Portico's replicas ("true"
or empty): service.create when set, else only when they serve the class's
traffic (Shared mode).
*/}}
{{- define "portico.serviceCreated" -}}
{{- if kindIs "bool" .Values.service.create }}
{{- if .Values.service.create }}true{{ end }}
{{- else if not (include "portico.perGateway" .) }}true
{{- end }}
{{- end }}

{{/* The flags of "portico serve". Only those that differ from Portico's defaults are given. */}}
{{- define "portico.args" -}}
- serve
- {{ print "--log-format=" .Values.log.format | quote }}
{{- if ne .Values.log.level "info" }}
- {{ print "--log-level=" .Values.log.level | quote }}
{{- end }}
- --admin-address=:{{ .Values.admin.port }}
{{- if .Values.gatewayAddresses }}
- {{ print "--gateway-address=" (join "," .Values.gatewayAddresses) | quote }}
{{- else if include "portico.serviceCreated" . }}
- --gateway-service=$(POD_NAMESPACE)/{{ include "portico.fullname" . }}
{{- end }}
{{- if .Values.gatewayAddressPool }}
- {{ print "--gateway-address-pool=" (join "," .Values.gatewayAddressPool) | quote }}
{{- end }}
- {{ print "--drain-timeout=" .Values.drainTimeout | quote }}
- --data-plane-listen=:9443
- --data-plane-controller-address={{ include "portico.fullname" . }}-controller.$(POD_NAMESPACE).svc:9443
{{- /* Per-Gateway data planes run the chart's own image. */}}
- {{ print "--data-plane-image=" (include "portico.image" .) | quote }}
{{- if ne .Values.image.pullPolicy "IfNotPresent" }}
- {{ print "--data-plane-image-pull-policy=" .Values.image.pullPolicy | quote }}
{{- end }}
{{- if ne .Values.gatewayClass.controllerName "portico.dev/gateway-controller" }}
- {{ print "--controller-name=" .Values.gatewayClass.controllerName | quote }}
{{- end }}
{{- if .Values.log.accessLog }}
- --access-log=-
{{- end }}
{{- with .Values.tracing }}
{{- if .endpoint }}
- {{ print "--tracing-endpoint=" .endpoint | quote }}
- {{ print "--tracing-protocol=" .protocol | quote }}
- {{ print "--tracing-sample-ratio=" .sampleRatio | quote }}
{{- if .insecure }}
- --tracing-insecure
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.acme }}
{{- if .directory }}
- {{ print "--acme-directory=" .directory | quote }}
{{- end }}
{{- if .email }}
- {{ print "--acme-email=" .email | quote }}
{{- end }}
{{- if .concurrency }}
- {{ print "--acme-concurrency=" .concurrency | quote }}
{{- end }}
{{- if .caBundle.configMap }}
- {{ print "--acme-ca-bundle=/etc/portico/acme-ca/" .caBundle.key | quote }}
{{- end }}
{{- if .eab.secretName }}
{{- /* The key ID expanded by the kubelet from the Secret, the HMAC key read from its mounted file: neither is in the pod spec. */}}
- --acme-eab-key-id=$(ACME_EAB_KEY_ID)
- --acme-eab-hmac-key-file=/etc/portico/acme-eab/hmac-key
{{- end }}
{{- end }}
{{- with .Values.knative }}
{{- if .enabled }}
- --knative
{{- if ne .ingressClass "portico.ingress.networking.knative.dev" }}
- {{ print "--knative-ingress-class=" .ingressClass | quote }}
{{- end }}
{{- if ne .certificateClass "portico.certificate.networking.knative.dev" }}
- {{ print "--knative-certificate-class=" .certificateClass | quote }}
{{- end }}
- --knative-external-service=$(POD_NAMESPACE)/{{ include "portico.fullname" $ }}-external
- --knative-local-service=$(POD_NAMESPACE)/{{ include "portico.fullname" $ }}-internal
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "portico.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "portico.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}
