{{/* Names: the release-scoped base name, truncated to what Kubernetes accepts. */}}
{{- define "takoform-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "takoform-operator.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "takoform-operator.fullname" .) -}}
{{- end -}}

{{/* Selector labels: immutable once installed, so they carry identity only. */}}
{{- define "takoform-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels on every object. */}}
{{- define "takoform-operator.labels" -}}
{{ include "takoform-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: takoform-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Every (group, plural) of the CRDs the chart ships, for RBAC. */}}
{{- define "takoform-operator.crdResources" -}}
{{- $groups := dict -}}
{{- range $path, $_ := .Files.Glob "crds/*.yaml" -}}
{{- $crd := $.Files.Get $path | fromYaml -}}
{{- $plurals := get $groups $crd.spec.group | default list -}}
{{- $_ := set $groups $crd.spec.group (append $plurals $crd.spec.names.plural) -}}
{{- end -}}
{{- toYaml $groups -}}
{{- end -}}

{{/* The alert rule groups with the durations and severity of values.yaml filled in. */}}
{{- define "takoform-operator.alertRules" -}}
{{- .Files.Get "files/alert-rules.yaml"
    | replace "__BLOCKED_FOR__" .Values.alerts.blockedFor
    | replace "__STUCK_FOR__" .Values.alerts.stuckOperationFor
    | replace "__HOST_ERRORS_FOR__" .Values.alerts.hostErrorsFor
    | replace "__BLOCKED_SEVERITY__" .Values.alerts.blockedSeverity
    | replace "__DEGRADED_FOR__" .Values.alerts.degradedFor
    | replace "__OPERATOR_DOWN_FOR__" .Values.alerts.operatorDownFor
    | replace "__RUNBOOKS__" .Values.alerts.runbookBaseUrl -}}
{{- end -}}

{{/* The reference host (values referenceHost): its objects' base name. */}}
{{- define "takoform-operator.referenceHost.name" -}}
{{- printf "%s-reference-host" (include "takoform-operator.fullname" . | trunc 48 | trimSuffix "-") -}}
{{- end -}}

{{/* Its pods' selector labels: another app name than the operator's, so no selector of the
operator (Deployment, metrics Service, PodDisruptionBudget, NetworkPolicy) matches its pod. */}}
{{- define "takoform-operator.referenceHost.selectorLabels" -}}
app.kubernetes.io/name: takoform-host
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: reference-host
{{- end -}}

{{- define "takoform-operator.referenceHost.labels" -}}
{{ include "takoform-operator.referenceHost.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: takoform-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The URL of the implicit host `default`: the reference host when it runs here (on the
node's loopback with hostNetwork: no Service addresses there), else host.url. */}}
{{- define "takoform-operator.hostUrl" -}}
{{- if .Values.referenceHost.enabled -}}
{{- if .Values.hostNetwork -}}
{{- printf "http://127.0.0.1:%d" (int .Values.referenceHost.port) -}}
{{- else -}}
{{- printf "http://%s.%s.svc:%d" (include "takoform-operator.referenceHost.name" .) .Release.Namespace (int .Values.referenceHost.port) -}}
{{- end -}}
{{- else -}}
{{- .Values.host.url -}}
{{- end -}}
{{- end -}}

{{/* The Secret (and its key) holding the implicit host's token. */}}
{{- define "takoform-operator.hostTokenSecretName" -}}
{{- if .Values.referenceHost.enabled -}}
{{- printf "%s-token" (include "takoform-operator.referenceHost.name" .) -}}
{{- else -}}
{{- .Values.host.tokenSecret.name -}}
{{- end -}}
{{- end -}}

{{- define "takoform-operator.hostTokenSecretKey" -}}
{{- ternary "token" .Values.host.tokenSecret.key .Values.referenceHost.enabled -}}
{{- end -}}
