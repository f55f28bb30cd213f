{{/* Prefix of every object name: infergate unless fullnameOverride says otherwise. */}}
{{- define "infergate.fullname" -}}
{{- .Values.fullnameOverride | default "infergate" | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels: the object's own (from manifests/), extra ones from values, Helm's release labels. */}}
{{- define "infergate.labels" -}}
{{- $root := index . 0 -}}
{{- $chart := printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" -}}
{{- $release := dict "helm.sh/chart" $chart "app.kubernetes.io/managed-by" $root.Release.Service -}}
{{- $_ := set $release "app.kubernetes.io/instance" $root.Release.Name -}}
{{- $_ := set $release "app.kubernetes.io/version" $root.Chart.AppVersion -}}
{{- toYaml (merge (dict) $release (index . 2 | default dict) (index . 1)) -}}
{{- end -}}

{{- define "infergate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The operator's arguments: those of manifests/, the watched namespaces, extras. */}}
{{- define "infergate.operatorArgs" -}}
{{- if and (eq .Values.rbac.scope "namespace") (not .Values.watchNamespaces) -}}
{{- fail "rbac.scope=namespace needs watchNamespaces: the namespaces the operator may act in" -}}
{{- end -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespace")) -}}
{{- fail (printf "rbac.scope: %q is not allowed; use cluster or namespace" .Values.rbac.scope) -}}
{{- end -}}
{{- $args := list -}}
{{- range .Values.operator.args }}{{ $args = append $args . }}{{ end -}}
{{- range .Values.watchNamespaces -}}
{{- if and (eq $.Values.rbac.scope "namespace") (regexMatch "[*?\\[\\]!]" .) -}}
{{- fail (printf "watchNamespaces: %q is a pattern; rbac.scope=namespace needs exact names" .) -}}
{{- end -}}
{{- if eq . $.Release.Namespace -}}
{{- $runners := "the release namespace, where the parity runners run" -}}
{{- fail (printf "watchNamespaces: %q is %s; list only the tenants' namespaces" . $runners) -}}
{{- end -}}
{{- $args = append $args (printf "--namespace=%s" .) -}}
{{- end -}}
{{- range .Values.imagePullSecrets -}}
{{- $args = append $args (printf "--image-pull-secret=%s" .name) -}}
{{- end -}}
{{- range $key, $value := .Values.runner.serviceAccountAnnotations -}}
{{- $args = append $args (printf "--runner-service-account-annotation=%s=%s" $key $value) -}}
{{- end -}}
{{- range .Values.operator.extraArgs }}{{ $args = append $args . }}{{ end -}}
{{- toYaml $args -}}
{{- end -}}

{{/* The operator's environment; INFERGATE_RUNNER_IMAGE when the runner's image is not
     the default the operator already knows. */}}
{{- define "infergate.operatorEnv" -}}
{{- $env := list -}}
{{- range .Values.operator.env }}{{ $env = append $env . }}{{ end -}}
{{- $runner := .Values.runner.image | default (include "infergate.image" .) -}}
{{- if ne $runner "ghcr.io/infergate/infergate:0.1.0" -}}
{{- $env = append $env (dict "name" "INFERGATE_RUNNER_IMAGE" "value" $runner) -}}
{{- end -}}
{{- range .Values.operator.extraEnv }}{{ $env = append $env . }}{{ end -}}
{{- toYaml $env -}}
{{- end -}}
