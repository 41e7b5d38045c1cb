# workerd configuration for the Beachball scheduler (built by deploy/workerd/build.ts).
# Every object class is a SQLite-backed Durable Object stored under the "storage" directory
# (--directory-path storage=<dir>); the manifest comes from the environment (BB_MANIFEST).
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "scheduler", worker = .scheduler),
    (name = "storage", disk = (path = "storage", writable = true)),
  ],
  sockets = [(name = "http", address = "127.0.0.1:8787", http = (), service = "scheduler")],
);

const scheduler :Workerd.Worker = (
  modules = [(name = "entry.js", esModule = embed "entry.js")],
  compatibilityDate = "2025-09-01",
  compatibilityFlags = ["nodejs_compat"],
  bindings = [
    (name = "BB_MANIFEST", fromEnvironment = "BB_MANIFEST"),
    (name = "BB_PUBLIC_URL", fromEnvironment = "BB_PUBLIC_URL"),
    (name = "BB_CONNECTION_SIGNING_KEY", fromEnvironment = "BB_CONNECTION_SIGNING_KEY"),
    (name = "Allocation", durableObjectNamespace = "Allocation"),
    (name = "AllocationIndex", durableObjectNamespace = "AllocationIndex"),
    (name = "Admission", durableObjectNamespace = "Admission"),
    (name = "Enrollment", durableObjectNamespace = "Enrollment"),
    (name = "Host", durableObjectNamespace = "Host"),
    (name = "HostDirectory", durableObjectNamespace = "HostDirectory"),
    (name = "Operations", durableObjectNamespace = "Operations"),
    (name = "Network", durableObjectNamespace = "Network"),
    (name = "NetworkDirectory", durableObjectNamespace = "NetworkDirectory"),
    (name = "Connection", durableObjectNamespace = "Connection"),
    (name = "RunQueue", durableObjectNamespace = "RunQueue"),
    (name = "Usage", durableObjectNamespace = "Usage"),
    (name = "Leases", durableObjectNamespace = "Leases"),
  ],
  durableObjectNamespaces = [
    (className = "Allocation", uniqueKey = "beachball-allocation", enableSql = true),
    (className = "AllocationIndex", uniqueKey = "beachball-allocation-index", enableSql = true),
    (className = "Admission", uniqueKey = "beachball-admission", enableSql = true),
    (className = "Enrollment", uniqueKey = "beachball-enrollment", enableSql = true),
    (className = "Host", uniqueKey = "beachball-host", enableSql = true),
    (className = "HostDirectory", uniqueKey = "beachball-host-directory", enableSql = true),
    (className = "Operations", uniqueKey = "beachball-operations", enableSql = true),
    (className = "Network", uniqueKey = "beachball-network", enableSql = true),
    (className = "NetworkDirectory", uniqueKey = "beachball-network-directory", enableSql = true),
    (className = "Connection", uniqueKey = "beachball-connection", enableSql = true),
    (className = "RunQueue", uniqueKey = "beachball-run-queue", enableSql = true),
    (className = "Usage", uniqueKey = "beachball-usage", enableSql = true),
    (className = "Leases", uniqueKey = "beachball-leases", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "storage"),
);
