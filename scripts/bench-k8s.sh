#!/usr/bin/env bash
# bench-k8s.sh [N...]
#
# Times the kubernetes backend side by side with the same objects made two other ways, on the test cluster
# (scripts/k8s-env.sh start), for N proxies each (default: 10 then 30):
#
#   raw      plain typed REST calls without client-side rate limit, 10 proxies at a time
#            (bench raw, internal/cmd/bench): create waits until each Deployment is Available,
#            destroy until each proxy's objects are deleted and its pods terminating;
#   generic  the generic Kubernetes provider's kubernetes_config_map_v1, kubernetes_deployment_v1 (waiting for
#            its rollout) and kubernetes_service_v1, through Terraform; only when GENERIC_PROVIDER names its
#            binary (a terraform-provider-kubernetes built or downloaded by you: the project does not ship it);
#   egress   egress_proxy with network_policy = false, so that it makes the same three objects, through
#            Terraform.
#
# Terraform plans before it applies, and a destroy refreshes every resource first: the raw calls do neither.
# So the table also gives egress_proxy's apply less its plan (timed alone, before the apply) and its destroy
# less its refresh (the plan step), against raw: the provider's own share.
#
# All three make the same pods: the generic provider's configuration reads the container, probe, volumes and
# security settings from the objects the backend renders. Terraform runs at its default parallelism (10).
# Prints seconds per step and the ratios of egress_proxy to raw and to generic. A benchmark, not a test: not
# part of make test. Figures depend on the machine; compare ratios measured in one run. The arithmetic and the
# few calls to the cluster (the namespace, the objects, the raw leg) are internal/cmd/bench's, built first.
#
# Environment: KUBECONFIG (the test cluster's by default), TERRAFORM (Terraform 1.15.9 from the cache by
# default), PROVIDER_BIN (an egress provider binary to time instead of one built from this tree),
# GENERIC_PROVIDER (see above), IMAGE (the proxy image, the dev image the test cluster imports by default).
# It works in a namespace of its own, egress-bench-<pid>, and deletes it at the end; nothing else on the
# cluster is touched.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/provider-mirror.sh
. "$root/scripts/provider-mirror.sh"
cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
export KUBECONFIG=${KUBECONFIG:-/var/tmp/egress-k8s/kubeconfig}
terraform=${TERRAFORM:-$cache/terraform-v1.15.9/terraform}
image=${IMAGE:-localhost/egress-proxies/squid:dev}
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(10 30)

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"
[ -r "$KUBECONFIG" ] || { log "no kubeconfig at $KUBECONFIG (start the test cluster: scripts/k8s-env.sh start)"; exit 1; }
[ -x "$terraform" ] || { log "no Terraform at $terraform (make terraform, or set TERRAFORM)"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egress-bench-k8s.XXXXXX")
ns=egress-bench-$$
bench=$tmp/bench

cleanup() {
	local d
	for d in egress generic; do
		if [ -f "$tmp/$d/terraform.tfstate" ]; then
			"$terraform" -chdir="$tmp/$d" destroy -auto-approve -input=false -no-color >>"$tmp/$d.cleanup.log" 2>&1 || true
		fi
	done
	if [ -x "$bench" ]; then kube_namespace delete >/dev/null 2>&1 || true; fi
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT

# The namespace, made and removed with the clientset the raw leg uses (no kubectl needed).
kube_namespace() {
	"$bench" namespace "$1" -kubeconfig "$KUBECONFIG" "$ns" >"$tmp/namespace-$1.log" 2>&1 ||
		{ cat "$tmp/namespace-$1.log" >&2; return 1; }
}

log "building the bench command and the provider"
(cd "$root" && go build -o "$bench" ./internal/cmd/bench)
egress_address=registry.terraform.io/egress-proxies/egress
if [ -n "${PROVIDER_BIN:-}" ]; then
	cp "$PROVIDER_BIN" "$tmp/provider"
else
	(cd "$root" && go build -o "$tmp/provider" .)
fi
mirror_provider "$tmp/mirror" "$egress_address" 0.0.1 "$tmp/provider"
generic_address=registry.terraform.io/hashicorp/kubernetes
if [ -n "${GENERIC_PROVIDER:-}" ]; then
	mirror_provider "$tmp/mirror" "$generic_address" 3.0.0 "$GENERIC_PROVIDER"
else
	log "GENERIC_PROVIDER is not set: the generic provider's column is left out"
fi
mirror_cli_config "$tmp/mirror" "$tmp/clirc" "$egress_address" "$generic_address"
unset TF_CLI_ARGS TF_CLI_ARGS_apply TF_CLI_ARGS_plan TF_CLI_ARGS_destroy TF_PLUGIN_CACHE_DIR TF_DATA_DIR TF_WORKSPACE TF_LOG

kube_namespace create
# The objects the backend renders, for the generic provider's configuration.
"$bench" objects -namespace "$ns" -image "$image" >"$tmp/objects.json" 2>"$tmp/objects.log" ||
	{ cat "$tmp/objects.log" >&2; exit 1; }

mkdir -p "$tmp/egress" "$tmp/generic"
cat >"$tmp/egress/main.tf" <<'TF'
terraform {
  required_providers {
    egress = { source = "egress-proxies/egress" }
  }
}
variable "n" { type = number }
variable "namespace" { type = string }
variable "kubeconfig" { type = string }
variable "image" { type = string }

provider "egress" {
  owner = "bench"
  kubernetes = {
    clusters = { bench = { config_path = var.kubeconfig, image = var.image } }
  }
}

resource "egress_proxy" "p" {
  count                = var.n
  name                 = format("eg-%03d", count.index)
  kubernetes           = { cluster = "bench", namespace = var.namespace, network_policy = false }
  allowed_client_cidrs = ["10.244.0.0/16"]
  allowed_destinations = ["example.com"]
}
TF
cat >"$tmp/generic/main.tf" <<'TF'
terraform {
  required_providers {
    kubernetes = { source = "hashicorp/kubernetes" }
  }
}
variable "n" { type = number }
variable "namespace" { type = string }
variable "kubeconfig" { type = string }
variable "image" { type = string }
variable "objects" { type = string }

provider "kubernetes" {
  config_path = var.kubeconfig
}

locals {
  o   = jsondecode(file(var.objects))
  pod = local.o.deployment.spec.template.spec
  c   = local.pod.containers[0]
}

resource "kubernetes_config_map_v1" "p" {
  count = var.n
  metadata {
    name      = format("ge-%03d", count.index)
    namespace = var.namespace
  }
  data = local.o.configMap.data
}

resource "kubernetes_deployment_v1" "p" {
  count = var.n
  metadata {
    name      = format("ge-%03d", count.index)
    namespace = var.namespace
  }
  spec {
    replicas                  = 1
    progress_deadline_seconds = local.o.deployment.spec.progressDeadlineSeconds
    selector {
      match_labels = { app = format("ge-%03d", count.index) }
    }
    strategy {
      type = "RollingUpdate"
      rolling_update {
        max_surge       = 1
        max_unavailable = 0
      }
    }
    template {
      metadata {
        labels = { app = format("ge-%03d", count.index) }
      }
      spec {
        automount_service_account_token  = false
        termination_grace_period_seconds = local.pod.terminationGracePeriodSeconds
        security_context {
          run_as_non_root = true
          run_as_user     = local.pod.securityContext.runAsUser
          run_as_group    = local.pod.securityContext.runAsGroup
          seccomp_profile { type = "RuntimeDefault" }
        }
        container {
          name                       = local.c.name
          image                      = var.image
          image_pull_policy          = "IfNotPresent"
          command                    = local.c.command
          args                       = local.c.args
          termination_message_path   = local.c.terminationMessagePath
          termination_message_policy = local.c.terminationMessagePolicy
          dynamic "env" {
            for_each = local.c.env
            content {
              name = env.value.name
              value_from {
                field_ref {
                  api_version = "v1"
                  field_path  = env.value.valueFrom.fieldRef.fieldPath
                }
              }
            }
          }
          dynamic "port" {
            for_each = local.c.ports
            content {
              name           = port.value.name
              container_port = port.value.containerPort
            }
          }
          readiness_probe {
            http_get {
              path = local.c.readinessProbe.httpGet.path
              port = local.c.readinessProbe.httpGet.port
            }
            period_seconds    = local.c.readinessProbe.periodSeconds
            failure_threshold = local.c.readinessProbe.failureThreshold
          }
          security_context {
            run_as_non_root            = true
            run_as_user                = local.c.securityContext.runAsUser
            run_as_group               = local.c.securityContext.runAsGroup
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            capabilities { drop = ["ALL"] }
            seccomp_profile { type = "RuntimeDefault" }
          }
          dynamic "volume_mount" {
            for_each = local.c.volumeMounts
            content {
              name       = volume_mount.value.name
              mount_path = volume_mount.value.mountPath
              read_only  = try(volume_mount.value.readOnly, false)
            }
          }
        }
        volume {
          name = "config"
          config_map { name = kubernetes_config_map_v1.p[count.index].metadata[0].name }
        }
        dynamic "volume" {
          for_each = [for v in local.pod.volumes : v if try(v.emptyDir, null) != null]
          content {
            name = volume.value.name
            empty_dir { size_limit = volume.value.emptyDir.sizeLimit }
          }
        }
      }
    }
  }
}

resource "kubernetes_service_v1" "p" {
  count = var.n
  metadata {
    name      = format("ge-%03d", count.index)
    namespace = var.namespace
  }
  spec {
    type     = "ClusterIP"
    selector = { app = format("ge-%03d", count.index) }
    port {
      name        = "proxy"
      port        = 3128
      target_port = "proxy"
    }
  }
}
TF

now() { date +%s.%N; }
# timed LABEL COMMAND...: runs the command, keeps its log, records its wall time in the timings the table reads.
timed() {
	local label=$1 start end s
	shift
	start=$(now)
	if ! "$@" >"$tmp/$label.log" 2>&1; then
		log "$label failed:"
		tail -40 "$tmp/$label.log" >&2
		exit 1
	fi
	end=$(now)
	s=$("$bench" elapsed "$start" "$end")
	echo "$label $s" >>"$tmp/seconds"
	log "$label: $s s"
}
tf() {
	local dir=$1 n=$2
	shift 2
	local vars=(-var "n=$n" -var "namespace=$ns" -var "kubeconfig=$KUBECONFIG" -var "image=$image")
	[ "$dir" = generic ] && vars+=(-var "objects=$tmp/objects.json")
	"$terraform" -chdir="$tmp/$dir" "$@" -input=false -no-color "${vars[@]}"
}
raw() { "$bench" raw "$2" -kubeconfig "$KUBECONFIG" -namespace "$ns" -image "$image" -proxies "$1"; }

legs=(egress)
[ -n "${GENERIC_PROVIDER:-}" ] && legs+=(generic)
for d in "${legs[@]}"; do
	"$terraform" -chdir="$tmp/$d" init -input=false -no-color >"$tmp/$d.init.log" 2>&1 ||
		{ cat "$tmp/$d.init.log" >&2; exit 1; }
done

for n in "${counts[@]}"; do
	timed "raw-apply-$n" raw "$n" create
	timed "raw-destroy-$n" raw "$n" destroy
	for d in "${legs[@]}"; do
		timed "$d-plan-$n" tf "$d" "$n" plan
		timed "$d-apply-$n" tf "$d" "$n" apply -auto-approve
		timed "$d-refresh-$n" tf "$d" "$n" plan -detailed-exitcode
		timed "$d-destroy-$n" tf "$d" "$n" destroy -auto-approve
	done
done

# Seconds per step, and the ratios of egress_proxy to raw and to generic; also egress_proxy's own share, its
# apply less its plan and its destroy less its refresh, over raw. A step a leg does not have is a -.
"$bench" k8s-table "${counts[@]}" <"$tmp/seconds"
