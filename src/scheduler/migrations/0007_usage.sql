CREATE TABLE `usage_intervals` (
	`obj` text NOT NULL,
	`allocation_id` text NOT NULL,
	`generation` integer NOT NULL,
	`tenant` text NOT NULL,
	`workload_class` text NOT NULL,
	`host_id` text NOT NULL,
	`cpu_millis` integer NOT NULL,
	`memory_mib` integer NOT NULL,
	`started_at_ms` integer NOT NULL,
	`ended_at_ms` integer,
	PRIMARY KEY(`obj`, `allocation_id`, `generation`)
);
--> statement-breakpoint
CREATE INDEX `usage_intervals_started` ON `usage_intervals` (`obj`,`started_at_ms`);