/**
 * zod schemas of the core, apps and batch kinds ward reads (Pod, Service, workload templates).
 * They are lenient: unknown fields are ignored without a warning, since ward models only what
 * inbound policy and the local runtime need.
 */
import { z } from 'zod';
import { intOrString, optString, portNumber, stringMap } from './schema-parts.js';
import type { PodSpec } from './types.js';

const optCount = z.int().min(0).optional();

const probe = z.object({
  httpGet: z
    .object({ port: intOrString, path: optString, scheme: optString, httpHeaders: z.array(z.object({ name: z.string(), value: z.string() })).optional() })
    .optional(),
  tcpSocket: z.object({ port: intOrString }).optional(),
  grpc: z.object({ port: portNumber, service: optString }).optional(),
  initialDelaySeconds: optCount,
  periodSeconds: optCount,
  timeoutSeconds: optCount,
  successThreshold: optCount,
  failureThreshold: optCount,
});

const envVar = z.object({
  name: z.string(),
  value: optString,
  valueFrom: z.object({ fieldRef: z.object({ fieldPath: z.string() }).optional() }).optional(),
});

const container = z.object({
  name: z.string(),
  image: optString,
  command: z.array(z.string()).optional(),
  args: z.array(z.string()).optional(),
  workingDir: optString,
  env: z.array(envVar).optional(),
  ports: z.array(z.object({ name: optString, containerPort: portNumber, protocol: optString })).optional(),
  livenessProbe: probe.optional(),
  readinessProbe: probe.optional(),
  startupProbe: probe.optional(),
});

/** A pod spec; the deprecated `serviceAccount` stands in for an absent `serviceAccountName`. */
export const podSpec = z
  .object({
    serviceAccountName: optString,
    serviceAccount: optString,
    containers: z.array(container),
    initContainers: z.array(container).optional(),
    restartPolicy: optString,
  })
  .transform(({ serviceAccount, serviceAccountName, ...rest }): PodSpec => {
    const sa = serviceAccountName ?? serviceAccount;
    return { ...rest, ...(sa !== undefined ? { serviceAccountName: sa } : {}) };
  });

/** `status` of a Pod, as far as ward cares. */
export const podStatus = z.object({
  podIP: optString,
  phase: optString,
  conditions: z.array(z.object({ type: z.string(), status: z.string() })).optional(),
});

/** A pod template (`metadata` labels/annotations and `spec`). */
export const podTemplate = z.object({
  metadata: z.object({ labels: stringMap.default({}), annotations: stringMap.default({}) }).default({ labels: {}, annotations: {} }),
  spec: podSpec,
});

/** Deployment, StatefulSet and ReplicaSet spec. */
export const replicatedSpec = z.object({ replicas: z.int().min(0).default(1), template: podTemplate });
/** DaemonSet and Job spec (one pod stands for the workload). */
export const singlePodSpec = z.object({ template: podTemplate });
/** CronJob spec. */
export const cronJobSpec = z.object({ jobTemplate: z.object({ spec: singlePodSpec }) });

/** core/v1 Service spec. */
export const serviceSpec = z
  .object({
    selector: stringMap.optional(),
    clusterIP: optString,
    publishNotReadyAddresses: z.boolean().optional(),
    ports: z
      .array(z.object({ name: optString, port: portNumber, targetPort: intOrString.optional(), protocol: optString, appProtocol: optString }))
      .default([]),
  })
  .prefault({});
