{{/* Names. The chart's name (nameOverride), the app.kubernetes.io/name of the operator's objects. */}}
{{- define "takoform-operator.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release-scoped base name of every object (fullnameOverride, else RELEASE-NAME, or the
     release's name alone when it already holds the chart's name), truncated to what Kubernetes
     accepts. */}}
{{- define "takoform-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "takoform-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The metrics Service: a DNS label (63 characters at most), and the scrape job's name. */}}
{{- define "takoform-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "takoform-operator.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/* An image reference of the operator's image: repository@digest when image.digest is set (the
     tag is then ignored), else repository:tag (the chart's appVersion when tag is empty). */}}
{{- define "takoform-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "takoform-operator.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "takoform-operator.fullname" .) -}}
{{- end -}}

{{/* Selector labels: immutable once installed, so they carry identity only. */}}
{{- define "takoform-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "takoform-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels on every object, and commonLabels (the schema keeps them off these keys). */}}
{{- define "takoform-operator.labels" -}}
{{ include "takoform-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: takoform-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Every (group, plural) of the CRDs the chart ships, for RBAC (crds/ also holds the
     bindings' admission policy, two documents in one file: not a CRD). */}}
{{- define "takoform-operator.crdResources" -}}
{{- $groups := dict -}}
{{- range $path, $_ := .Files.Glob "crds/*.yaml" -}}
{{- $crd := $.Files.Get $path | fromYaml -}}
{{- if eq (get $crd "kind" | default "") "CustomResourceDefinition" -}}
{{- $plurals := get $groups $crd.spec.group | default list -}}
{{- $_ := set $groups $crd.spec.group (append $plurals $crd.spec.names.plural) -}}
{{- end -}}
{{- end -}}
{{- toYaml $groups -}}
{{- end -}}

{{/* A Prometheus duration (1h30m, 1d, 1m30s, 500ms) in milliseconds. The schema admits only
     what this parses. */}}
{{- define "takoform-operator.milliseconds" -}}
{{- $units := dict "y" 31536000000 "w" 604800000 "d" 86400000 "h" 3600000 "m" 60000 "s" 1000 "ms" 1 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|[ywdhms])" . -1 -}}
{{- $n := regexFind "^[0-9]+" . | int64 -}}
{{- $total = add $total (mul $n (get $units (trimPrefix (regexFind "^[0-9]+" .) .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* The same in whole seconds, for the rules that compare a condition's age with it. */}}
{{- define "takoform-operator.seconds" -}}
{{- div (include "takoform-operator.milliseconds" . | int64) 1000 -}}
{{- end -}}

{{/* Where the alerts' runbook_url points: alerts.runbookBaseUrl, else docs/runbooks.md of the
     chart's own version in the project's repository. */}}
{{- define "takoform-operator.runbookBaseUrl" -}}
{{- .Values.alerts.runbookBaseUrl | default (printf "https://github.com/takoform/takoform-operator/blob/v%s/docs/runbooks.md" .Chart.AppVersion) -}}
{{- end -}}

{{/* The alert rule groups with the values of values.yaml filled in. */}}
{{- define "takoform-operator.alertRules" -}}
{{- $resourceSelector := "" -}}
{{- if .Values.watchNamespace -}}
{{- $resourceSelector = printf ",namespace=%q" .Values.watchNamespace -}}
{{- end -}}
{{- $operatorSelector := .Values.alerts.operatorSelector | default (printf "namespace=%q,job=%q" .Release.Namespace (include "takoform-operator.metricsServiceName" .)) -}}
{{- $operatorBy := concat (list "namespace" "job") .Values.alerts.operatorDownBy | uniq | join ", " -}}
{{- $rules := .Files.Get "files/alert-rules.yaml"
    | replace "__BLOCKED_SECONDS__" (include "takoform-operator.seconds" .Values.alerts.blockedFor)
    | replace "__DEGRADED_SECONDS__" (include "takoform-operator.seconds" .Values.alerts.degradedFor)
    | replace "__STUCK_FOR__" .Values.alerts.stuckOperationFor
    | replace "__HOST_ERRORS_FOR__" .Values.alerts.hostErrorsFor
    | replace "__OPERATOR_DOWN_FOR__" .Values.alerts.operatorDownFor
    | replace "__SHARD_UNCLAIMED_FOR__" .Values.alerts.shardUnclaimedFor
    | replace "__BLOCKED_SEVERITY__" .Values.alerts.severity.blocked
    | replace "__DEGRADED_SEVERITY__" .Values.alerts.severity.degraded
    | replace "__STUCK_SEVERITY__" .Values.alerts.severity.operationStuck
    | replace "__RESOURCE_SELECTOR__" $resourceSelector
    | replace "__OPERATOR_SELECTOR__" $operatorSelector
    | replace "__OPERATOR_BY__" $operatorBy
    | replace "__RELEASE__" .Release.Name
    | replace "__RUNBOOKS__" (include "takoform-operator.runbookBaseUrl" .)
    | fromYaml -}}
{{- $groups := list -}}
{{- range $rules.groups -}}
{{- if or $.Values.alerts.resourceAlerts (ne .name "takoform-operator-resources") -}}
{{- $groups = append $groups . -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}

{{/* The CustomResourceStateMetrics of kube-state-metrics that the resource alerts read: for
     every Form CRD the chart ships (not the operator's own TakoformHost/grant/binding CRDs), its
     conditions (value and lastTransitionTime) and its pending host operation, labelled with the
     CR's namespace and name, its host and its fully qualified resource for kubectl. Generated
     (`make generate`) into the kube-prometheus-stack values the chart ships, read from there. */}}
{{- define "takoform-operator.kubeStateMetricsConfig" -}}
{{- $values := .Files.Get "files/kube-prometheus-stack-values.yaml" | fromYaml -}}
{{- index $values "kube-state-metrics" "customResourceState" "config" | toYaml -}}
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
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
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
