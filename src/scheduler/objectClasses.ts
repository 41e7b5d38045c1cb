/**
 * Every scheduler object class, as both hosts register them (the embedded
 * runtime in ./worker.ts, workerd in deploy/workerd/entry.ts).
 */
import { AllocationObject } from "./objects/allocationObject.ts";
import { AllocationIndexObject } from "./objects/allocationIndex.ts";
import { AdmissionObject } from "./objects/admissionObject.ts";
import { EnrollmentObject } from "./objects/enrollmentObject.ts";
import { HostDirectoryObject } from "./objects/hostDirectory.ts";
import { HostObject } from "./objects/hostObject.ts";
import { OperationsObject } from "./objects/operationsObject.ts";
import { NetworkObject } from "./objects/networkObject.ts";
import { NetworkDirectoryObject } from "./objects/networkDirectory.ts";
import { ConnectionObject } from "./objects/connectionObject.ts";
import { RunQueueObject } from "./objects/runQueueObject.ts";
import { UsageObject } from "./objects/usageObject.ts";
import { LeasesObject } from "./objects/leaseObject.ts";

/** The classes, each with its stable class name. */
export const OBJECT_CLASSES = [
  AllocationObject,
  AllocationIndexObject,
  AdmissionObject,
  EnrollmentObject,
  HostObject,
  HostDirectoryObject,
  OperationsObject,
  NetworkObject,
  NetworkDirectoryObject,
  ConnectionObject,
  RunQueueObject,
  UsageObject,
  LeasesObject,
] as const;
