{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "edgehub.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "edgehub.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "edgehub.labels" -}}
{{ include "edgehub.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* PostgreSQL mode: a store URL from a Secret, given or made. */}}
{{- define "edgehub.postgres" -}}
{{- if or .Values.store.postgres.existingSecret .Values.store.postgres.url -}}true{{- end -}}
{{- end -}}

{{- define "edgehub.adminKeySecret" -}}
{{- .Values.adminKey.existingSecret | default (printf "%s-admin-key" (include "edgehub.fullname" .)) -}}
{{- end -}}

{{- define "edgehub.storeSecret" -}}
{{- .Values.store.postgres.existingSecret | default (printf "%s-store" (include "edgehub.fullname" .)) -}}
{{- end -}}

{{/*
Refuses, with a message saying what to do, the values the chart cannot
run safely: several servers on one SQLite file, a store URL that is not
PostgreSQL's, and settings in env that the chart owns.
*/}}
{{- define "edgehub.validate" -}}
{{- if and (not (include "edgehub.postgres" .)) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "replicaCount is %d, but without a PostgreSQL store (store.postgres.existingSecret or store.postgres.url) the backlog is a SQLite file in one volume, which only one server may hold: set replicaCount to 1, or give a PostgreSQL store" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if lt (int .Values.replicaCount) 1 -}}
{{- fail "replicaCount must be at least 1" -}}
{{- end -}}
{{- with .Values.store.postgres.url -}}
{{- if not (or (hasPrefix "postgres://" .) (hasPrefix "postgresql://" .)) -}}
{{- fail "store.postgres.url must be a postgres:// or postgresql:// URL" -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := .Values.env -}}
{{- if has $name (list "EDGEHUB_ADMIN_KEY" "EDGEHUB_ADMIN_KEY_FILE" "EDGEHUB_STORE" "EDGEHUB_ADDR" "EDGEHUB_DATA" "EDGEHUB_DEV" "EDGEHUB_CONFIG") -}}
{{- fail (printf "env.%s is the chart's to set: use adminKey.* for the admin key, store.postgres.* for the store, service.port for the port (dev mode cannot run in a cluster: it listens on loopback only)" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The pod, the same in both modes but for the data volume: the Dockerfile's
user, nothing writable but /tmp and (on SQLite) /data, the admin key and
the store URL from Secrets, and the probes.
*/}}
{{- define "edgehub.podTemplate" -}}
metadata:
  labels:
    {{- include "edgehub.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  securityContext:
    # The Dockerfile's USER 65532:65532; fsGroup makes the data volume
    # that user's.
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    fsGroupChangePolicy: OnRootMismatch
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: edgehub
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["serve"]
      securityContext:
        runAsNonRoot: true
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: ["ALL"]
      ports:
        - name: http
          containerPort: {{ int .Values.service.port }}
          protocol: TCP
      env:
        - name: EDGEHUB_ADDR
          value: "0.0.0.0:{{ int .Values.service.port }}"
        {{- if not (include "edgehub.postgres" .) }}
        - name: EDGEHUB_DATA
          value: /data
        {{- end }}
        - name: EDGEHUB_ADMIN_KEY
          valueFrom:
            secretKeyRef:
              name: {{ include "edgehub.adminKeySecret" . }}
              key: {{ .Values.adminKey.secretKey }}
        {{- if include "edgehub.postgres" . }}
        - name: EDGEHUB_STORE
          valueFrom:
            secretKeyRef:
              name: {{ include "edgehub.storeSecret" . }}
              key: {{ .Values.store.postgres.secretKey }}
        {{- end }}
        {{- range $name, $value := .Values.env }}
        {{- /* A whole number in a values file is a float to YAML: 2097152, not 2.097152e+06. */}}
        {{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
        {{- $value = int64 $value }}
        {{- end }}
        - name: {{ $name }}
          value: {{ $value | toString | quote }}
        {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ int .Values.probes.startup.periodSeconds }}
        failureThreshold: {{ int .Values.probes.startup.failureThreshold }}
        timeoutSeconds: {{ int .Values.probes.startup.timeoutSeconds }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ int .Values.probes.liveness.periodSeconds }}
        failureThreshold: {{ int .Values.probes.liveness.failureThreshold }}
        timeoutSeconds: {{ int .Values.probes.liveness.timeoutSeconds }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: {{ int .Values.probes.readiness.periodSeconds }}
        failureThreshold: {{ int .Values.probes.readiness.failureThreshold }}
        timeoutSeconds: {{ int .Values.probes.readiness.timeoutSeconds }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        # SQLite's temporary files and, on PostgreSQL, read answers
        # spooled to disk: the root file system is read-only.
        - name: tmp
          mountPath: /tmp
        {{- if not (include "edgehub.postgres" .) }}
        - name: data
          mountPath: /data
        {{- end }}
  volumes:
    - name: tmp
      emptyDir: {}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
