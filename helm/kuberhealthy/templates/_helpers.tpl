{{/*
The name of the daemon's Deployment, Service, ServiceAccount and ConfigMap: "kuberhealthy" unless
nameOverride says otherwise. It does not include the release name, because checker images find the
Service by this name.
*/}}
{{- define "kuberhealthy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Cluster-scoped objects (ClusterRoles, ClusterRoleBindings) carry the release namespace in their name,
so releases in different namespaces do not fight over them.
*/}}
{{- define "kuberhealthy.clusterName" -}}
{{- printf "%s-%s" (include "kuberhealthy.name" .) .Release.Namespace -}}
{{- end -}}

{{/* The Deployment's selector; kept as "app: kuberhealthy", as in v2, so upgrades keep the selector. */}}
{{- define "kuberhealthy.selectorLabels" -}}
app: {{ include "kuberhealthy.name" . }}
{{- end -}}

{{- define "kuberhealthy.labels" -}}
{{ include "kuberhealthy.selectorLabels" . }}
app.kubernetes.io/name: {{ include "kuberhealthy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* Labels for the objects belonging to a bundled check. Call with (list $ "check-name"). */}}
{{- define "kuberhealthy.checkLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "kuberhealthy.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/*
An image reference from an image block (registry, repository, tag, digest). imageRegistry overrides
every registry. Call with (list $ .Values.image "default-tag").
*/}}
{{- define "kuberhealthy.imageRef" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $registry := $root.Values.imageRegistry | default $img.registry | default "" -}}
{{- $ref := $img.repository -}}
{{- if $registry -}}
{{- $ref = printf "%s/%s" (trimSuffix "/" $registry) $img.repository -}}
{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $ref $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (toString ($img.tag | default (index . 2))) -}}
{{- end -}}
{{- end -}}

{{/*
The URL checker pods report to. Empty when the daemon's own default
(http://kuberhealthy.<POD_NAMESPACE>.svc.cluster.local/externalCheckStatus) is right.
*/}}
{{- define "kuberhealthy.reportingURL" -}}
{{- $name := include "kuberhealthy.name" . -}}
{{- $port := int .Values.service.externalPort -}}
{{- if .Values.config.externalCheckReportingURL -}}
{{- .Values.config.externalCheckReportingURL -}}
{{- else if or (ne $name "kuberhealthy") (ne $port 80) (ne .Values.clusterDomain "cluster.local") -}}
{{- $host := printf "%s.%s.svc.%s" $name .Release.Namespace .Values.clusterDomain -}}
{{- if ne $port 80 -}}
{{- $host = printf "%s:%d" $host $port -}}
{{- end -}}
{{- printf "http://%s/externalCheckStatus" $host -}}
{{- end -}}
{{- end -}}

{{/* policy/v1 PodDisruptionBudget from Kubernetes 1.21, policy/v1beta1 (removed in 1.25) before. `helm install`
knows the server's API versions; `helm template` knows only --kube-version (its API versions are Helm's own). */}}
{{- define "kuberhealthy.pdbApiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}

{{/*
The parts every bundled check's podSpec shares. Call with (dict "root" $ "check" .Values.check.x).
With securityContext.enabled (the default) a bundled check's pod meets the Pod Security Standards'
restricted profile: non-root with a non-zero runAsUser (an upstream checker image may name no user, and
the kubelet refuses runAsNonRoot for an image running as root unless runAsUser names another),
the runtime's default seccomp profile, and (checkContainer) no privilege escalation and every capability
dropped. Without it the pod carries no securityContext at all and runs as its image says.
*/}}
{{- define "kuberhealthy.checkPodSecurity" -}}
{{- if .root.Values.securityContext.enabled }}
securityContext:
  runAsNonRoot: {{ .root.Values.securityContext.runAsNonRoot }}
  runAsUser: {{ .root.Values.securityContext.runAsUser }}
  fsGroup: {{ .root.Values.securityContext.fsGroup }}
  seccompProfile:
    type: RuntimeDefault
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .check.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .check.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A bundled check's container settings after name and env. Same arguments as above. */}}
{{- define "kuberhealthy.checkContainer" -}}
image: {{ include "kuberhealthy.imageRef" (list .root .check.image "latest") | quote }}
imagePullPolicy: IfNotPresent
{{- with .check.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .root.Values.securityContext.enabled }}
securityContext:
  allowPrivilegeEscalation: {{ .root.Values.securityContext.allowPrivilegeEscalation }}
  readOnlyRootFilesystem: {{ .root.Values.securityContext.readOnlyRootFilesystem }}
  capabilities:
    drop:
      - ALL
{{- end }}
{{- end -}}

{{/*
A bundled check's env list: the fixed entries (a list of EnvVar maps) followed by extraEnvs; an
extraEnvs entry replaces a fixed entry of the same name. Call with (dict "fixed" (list ...) "extra" map).
*/}}
{{- define "kuberhealthy.checkEnv" -}}
{{- $extra := .extra | default dict -}}
{{- $env := list -}}
{{- range .fixed -}}
{{- if not (hasKey $extra .name) -}}
{{- $env = append $env . -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $extra -}}
{{- $env = append $env (dict "name" $k "value" (toString $v)) -}}
{{- end -}}
{{- if $env -}}
env:
  {{- toYaml $env | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* Exactly the calls the daemon makes (see rbac.yaml): it reads khchecks and sets or removes their
     run-now annotation (merge patch), moves khjobs through their phases (merge patch) and reaps completed
     ones, writes khstates with create/PUT and reaps orphans, reads a failed checker's log tail, and
     raises Events on khchecks and khjobs (create, then patch to count repeats). */}}
{{- define "kuberhealthy.checkRules" -}}
- apiGroups: [comcast.github.io]
  resources: [khchecks]
  verbs: [get, list, watch, patch]
- apiGroups: [comcast.github.io]
  resources: [khjobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [comcast.github.io]
  resources: [khstates]
  verbs: [get, list, watch, create, update, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch, list]
{{- end -}}

{{/* Bundled checks live where the daemon looks for checks: targetNamespace, else the release namespace. */}}
{{- define "kuberhealthy.checkNamespace" -}}
{{- .Values.targetNamespace | default .Release.Namespace -}}
{{- end -}}

{{/*
A probe: the chart's (a dict) with the user's changes (deployment.<name>Probe) merged over it. A handler
in the changes (httpGet, tcpSocket, exec, grpc) replaces the chart's httpGet instead of joining it.
Call with (list $default $override).
*/}}
{{- define "kuberhealthy.probe" -}}
{{- $probe := deepCopy (index . 0) -}}
{{- $override := deepCopy (index . 1 | default dict) -}}
{{- range list "httpGet" "tcpSocket" "exec" "grpc" -}}
{{- if hasKey $override . -}}
{{- $_ := unset $probe "httpGet" -}}
{{- end -}}
{{- end -}}
{{- toYaml (mergeOverwrite $probe $override) -}}
{{- end -}}

{{/*
Keys of Kuberhealthy v2's chart that this chart accepts (values.schema.json's v2Ignored) but does nothing
with, one "- key: what to do instead" line each for those the values set. NOTES.txt prints them.
*/}}
{{- define "kuberhealthy.v2Ignored" -}}
{{- $hints := dict
  "imageURL" "set image.registry, image.repository and image.tag (or image.digest)"
  "namespace" "the release namespace is used: helm install --namespace"
  "stateMetadata" "no equivalent: khstates carry no extra metadata"
  "podSecurityPolicy" "PodSecurityPolicies are gone since Kubernetes 1.25; the pods are hardened by securityContext"
  "securityContext.seccompProfile" "every pod of the chart runs RuntimeDefault (the bundled checks while securityContext.enabled)"
  "prometheus.grafanaDashboard" "use grafana.dashboards"
  "prometheus.enableAlerting" "use prometheus.prometheusRule.enabled"
  "prometheus.enableScraping" "use prometheus.enabled"
  "prometheus.release" "use prometheus.serviceMonitor.release and prometheus.prometheusRule.release"
  "prometheus.additionalLabels" "use prometheus.serviceMonitor.additionalLabels and prometheus.prometheusRule.additionalLabels"
  "prometheus.serviceMonitor.rules" "no equivalent"
  "prometheus.prometheusRule.rules" "use prometheus.prometheusRule.additionalLabels"
  "check.storage" "v2's external storage check is not bundled: apply its khcheck yourself"
  "checkReaper.enabled" "the reaper runs inside the daemon"
  "checkReaper.image" "the reaper runs inside the daemon"
  "checkReaper.nodeSelector" "the reaper runs inside the daemon"
  "checkReaper.tolerations" "the reaper runs inside the daemon"
  "checkReaper.resources" "the reaper runs inside the daemon"
  "checkReaper.startingDeadlineSeconds" "the reaper runs inside the daemon"
  "checkReaper.jobCleanupDuration" "use checkReaper.maxKHJobAge"
  "checkReaper.failedPodCleanupDuration" "use checkReaper.maxCheckPodAge"
  "checkReaper.jobDeleteTimeDuration" "use checkReaper.maxKHJobAge"
  "checkReaper.maxCheckPods" "use checkReaper.maxCompletedPodCount and maxErrorPodCount"
  "checkReaper.maxPodsThreshold" "use checkReaper.maxCompletedPodCount and maxErrorPodCount"
  "deployment.env.TARGET_NAMESPACE" "use targetNamespace"
-}}
{{- range $path := keys $hints | sortAlpha -}}
{{- $node := $.Values -}}
{{- $found := true -}}
{{- range $part := splitList "." $path -}}
{{- if and $found (kindIs "map" $node) (hasKey $node $part) -}}
{{- $node = index $node $part -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if and $found (not (kindIs "invalid" $node)) }}
- {{ $path }}: {{ index $hints $path }}
{{- end -}}
{{- end -}}
{{- end -}}
