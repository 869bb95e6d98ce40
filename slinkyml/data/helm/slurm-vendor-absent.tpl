{{- /*
slinkyml (slinkyml/dev/kubernetes/helm.py): the slurm chart's templates/vendor/ folder is not in the operator's Go
module zip (the go command leaves out every folder named vendor), but templates/_vendor.tpl and
controller/controller-cr.yaml include these templates for NVIDIA DCGM and Google A3 Mega (and A3 Ultra at f2ed3fc). This file
stands in for that folder with those integrations off: each enabled check is empty, each node set patch
is empty (the contract in _vendor.tpl: "return empty output when the patch does not apply"), and a
values file that turns an integration on fails here rather than rendering without it.
*/}}

{{- define "slinkyml.vendor.absent" -}}
{{- fail (printf "vendor.%s is on, but the chart's templates/vendor folder is not in the Go module zip (slinkyml/data/helm/slurm-vendor-absent.tpl)" .) -}}
{{- end -}}

{{- define "slurm.vendor.nvidia.dcgm.enabled" -}}
{{- if ((((.Values.vendor | default dict).nvidia | default dict).dcgm | default dict).enabled) -}}
{{- include "slinkyml.vendor.absent" "nvidia.dcgm" -}}
{{- end -}}
{{- end -}}

{{- define "slurm.vendor.google.a3mega.enabled" -}}
{{- if (((.Values.vendor | default dict).google | default dict).a3mega) -}}
{{- include "slinkyml.vendor.absent" "google.a3mega" -}}
{{- end -}}
{{- end -}}

{{- define "slurm.vendor.nvidia.dcgm.nodesetPatch" -}}
{{- include "slurm.vendor.nvidia.dcgm.enabled" .root -}}
{{- end -}}

{{- define "slurm.vendor.google.a3mega.nodesetPatch" -}}
{{- include "slurm.vendor.google.a3mega.enabled" .root -}}
{{- end -}}

{{- define "slurm.vendor.nvidia.dcgm.prologName" -}}
{{- include "slinkyml.vendor.absent" "nvidia.dcgm" -}}
{{- end -}}

{{- define "slurm.vendor.nvidia.dcgm.epilogName" -}}
{{- include "slinkyml.vendor.absent" "nvidia.dcgm" -}}
{{- end -}}

{{- define "slurm.vendor.google.a3mega.configName" -}}
{{- include "slinkyml.vendor.absent" "google.a3mega" -}}
{{- end -}}

{{- /* f2ed3fc's chart adds Google A3 Ultra */}}
{{- define "slurm.vendor.google.a3ultra.enabled" -}}
{{- if (((.Values.vendor | default dict).google | default dict).a3ultra) -}}
{{- include "slinkyml.vendor.absent" "google.a3ultra" -}}
{{- end -}}
{{- end -}}

{{- define "slurm.vendor.google.a3ultra.nodesetPatch" -}}
{{- include "slurm.vendor.google.a3ultra.enabled" .root -}}
{{- end -}}

{{- define "slurm.vendor.google.a3ultra.configName" -}}
{{- include "slinkyml.vendor.absent" "google.a3ultra" -}}
{{- end -}}
