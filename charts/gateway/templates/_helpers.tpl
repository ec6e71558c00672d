{{- define "gateway.name" -}}
{{- default .Release.Name .Values.name | trunc 63 | trimSuffix "-" -}}
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
