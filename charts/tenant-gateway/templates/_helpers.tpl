{{- define "tenant-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tenant-gateway.fullname" -}}
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

{{- define "tenant-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenant-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tenant-gateway.labels" -}}
{{ include "tenant-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tenant-gateway
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "tenant-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tenant-gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tenant-gateway.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "self" -}}
{{- printf "%s-self-tls" (include "tenant-gateway.fullname" .) -}}
{{- else if eq .Values.certificates.mode "manual" -}}
{{- required "certificates.manual.secretName is required when certificates.mode is manual" .Values.certificates.manual.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "tenant-gateway.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "tenant-gateway.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}

{{/* Trusted groups with the release namespace's service-account group appended when asked. */}}
{{- define "tenant-gateway.trustedGroups" -}}
{{- $groups := list -}}
{{- range .Values.trustedGroups -}}
{{- $groups = append $groups (trim .) -}}
{{- end -}}
{{- $own := printf "system:serviceaccounts:%s" .Release.Namespace -}}
{{- if and .Values.trustReleaseNamespace (not (has $own $groups)) -}}
{{- $groups = append $groups $own -}}
{{- end -}}
{{- if not $groups -}}
{{- fail "trustedGroups is empty: no caller could write the guarded namespace labels, the reconciler included; list at least the group of the chart's ServiceAccount" -}}
{{- end -}}
{{- join "," $groups -}}
{{- end -}}

{{/*
Checks that fail the render with a clear message. Included by every template that depends
on them, so `helm template -s` of one file fails too.
*/}}
{{- define "tenant-gateway.validate" -}}
{{- $modes := list "deny" "warn" "audit" "off" -}}
{{- $layers := list "gateway" "package" "tenant" "namespace" "route" "ingress" "tenantgateway" -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*)$" (toString .Values.tenantPrefix)) -}}
{{- fail (printf "tenantPrefix=%q: must be lowercase letters, digits and '-' (a namespace-name prefix)" (toString .Values.tenantPrefix)) -}}
{{- end -}}
{{- range $layer, $mode := .Values.enforcement -}}
{{- $mode = include "tenant-gateway.mode" $mode -}}
{{- if not (has $layer $layers) -}}
{{- fail (printf "enforcement.%s: unknown layer (layers: %s)" $layer (join ", " $layers)) -}}
{{- end -}}
{{- if not (has (toString $mode) $modes) -}}
{{- fail (printf "enforcement.%s=%v: unknown mode (modes: %s)" $layer $mode (join ", " $modes)) -}}
{{- end -}}
{{- end -}}
{{- $ingress := "deny" -}}
{{- if hasKey .Values.enforcement "ingress" -}}
{{- $ingress = include "tenant-gateway.mode" .Values.enforcement.ingress -}}
{{- end -}}
{{- if and .Values.webhook.enabled (ne $ingress "off") (not (trim (toString (default "" .Values.rootHost)))) -}}
{{- fail "rootHost is required while the ingress layer is enabled (the webhook refuses to start without --root-host): set rootHost to the platform root apex, e.g. example.org, or enforcement.ingress=off" -}}
{{- end -}}
{{- if not (has .Values.certificates.mode (list "cert-manager" "manual" "self")) -}}
{{- fail (printf "certificates.mode=%v: unsupported (cert-manager, manual, self)" .Values.certificates.mode) -}}
{{- end -}}
{{- if and (eq .Values.certificates.mode "self") (not .Values.controller.enabled) -}}
{{- fail "certificates.mode=self needs controller.enabled: the reconciler's leader Lease gates who renews the certificate" -}}
{{- end -}}
{{- if and .Values.audit.policyReports (not .Values.controller.enabled) -}}
{{- fail "audit.policyReports needs controller.enabled: the reconciler's leader Lease gates who writes the PolicyReports" -}}
{{- end -}}
{{- if and .Values.audit.policyReports (not .Values.audit.enabled) -}}
{{- fail "audit.policyReports needs audit.enabled: the reports publish the continuous audit's results" -}}
{{- end -}}
{{- if and (eq .Values.certificates.mode "manual") .Values.webhook.enabled (not .Values.certificates.manual.caBundle) -}}
{{- fail "certificates.manual.caBundle (base64 of the CA PEM that signed certificates.manual.secretName) is required when certificates.mode is manual" -}}
{{- end -}}
{{- if not (has (toString .Values.controller.passthroughGateway) (list "shared" "separate")) -}}
{{- fail (printf "controller.passthroughGateway=%v: unsupported (shared, separate)" .Values.controller.passthroughGateway) -}}
{{- end -}}
{{- if not (has (toString .Values.log.format) (list "text" "json")) -}}
{{- fail (printf "log.format=%v: unsupported (text, json)" .Values.log.format) -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.apiServerCIDRs) -}}
{{- fail "networkPolicy.apiServerCIDRs is required when networkPolicy.enabled: list the API server's addresses (CIDRs), the only clients allowed on the webhook port" -}}
{{- end -}}
{{- include "tenant-gateway.layer6" . -}}
{{- end -}}

{{/* Layer 6: tenants join a Gateway with tenant.spec.gateway=true, never through this list. */}}
{{- define "tenant-gateway.layer6" -}}
{{- $prefix := default "tenant-" .Values.tenantPrefix -}}
{{- $raw := .Values.gateway.attachedNamespaces -}}
{{- $entries := list -}}
{{- if kindIs "string" $raw -}}
{{- $entries = splitList "," $raw -}}
{{- else if $raw -}}
{{- $entries = $raw -}}
{{- end -}}
{{- range $entries -}}
{{- $e := trim (toString .) -}}
{{- if hasPrefix $prefix $e -}}
{{- fail (printf "gateway.attachedNamespaces must not contain %s* namespaces: entry %q is a tenant namespace; tenants join a Gateway with tenant.spec.gateway=true, not through gateway.attachedNamespaces (layer 6)" $prefix $e) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* YAML 1.1 reads a bare `off` as false: it means the mode off. */}}
{{- define "tenant-gateway.mode" -}}
{{- if kindIs "bool" . -}}{{- if . -}}on{{- else -}}off{{- end -}}{{- else -}}{{- toString . -}}{{- end -}}
{{- end -}}

{{/* The names the API server calls the webhook by: the Service's, plus any given. */}}
{{- define "tenant-gateway.selfHosts" -}}
{{- $fullname := include "tenant-gateway.fullname" . -}}
{{- $hosts := list (printf "%s.%s.svc" $fullname .Release.Namespace) (printf "%s.%s.svc.cluster.local" $fullname .Release.Namespace) -}}
{{- range .Values.certificates.self.extraHosts -}}
{{- $hosts = append $hosts . -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}
