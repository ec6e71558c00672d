{{/*
The TenantGateway's name. At most 50 characters so that every name the controller derives
from it (<name>-acme-account, <name>-gateway, …) keeps its plain form, the one the cleanup
hook deletes.
*/}}
{{- define "gateway.name" -}}
{{- $n := default .Release.Name .Values.name -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,48}[a-z0-9])?$" $n) -}}
{{- fail (printf "name %q: the TenantGateway name must be a DNS label of at most 50 characters (set name, or use a shorter release name)" $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* A platform value: `_cluster.<key>` trimmed, "" when absent or null. */}}
{{- define "gateway.cluster" -}}
{{- $c := default dict .root.Values._cluster -}}
{{- trim (toString (default "" (index $c .key))) -}}
{{- end -}}

{{/* Attached namespaces as a JSON list: a comma-separated string or a list, trimmed, empties dropped. */}}
{{- define "gateway.attachedNamespaces" -}}
{{- $c := default dict .Values._cluster -}}
{{- $raw := index $c "gateway-attached-namespaces" -}}
{{- $entries := list -}}
{{- if kindIs "string" $raw -}}
{{- $entries = splitList "," $raw -}}
{{- else if $raw -}}
{{- $entries = $raw -}}
{{- end -}}
{{- $out := list -}}
{{- $prefix := default "tenant-" .Values.tenantPrefix -}}
{{- range $entries -}}
{{- $e := trim (toString .) -}}
{{- if hasPrefix $prefix $e -}}
{{- fail (printf "_cluster.gateway-attached-namespaces must not contain %s* namespaces: entry %q is a tenant namespace; tenants join a Gateway with tenant.spec.gateway=true, not through gateway.attachedNamespaces (layer 6)" $prefix $e) -}}
{{- end -}}
{{- if $e -}}
{{- $out = append $out $e -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
