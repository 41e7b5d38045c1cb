CREATE TABLE `allocation_log_chunks` (
	`obj` text NOT NULL,
	`start_offset` integer NOT NULL,
	`bytes` integer NOT NULL,
	`text` text NOT NULL,
	PRIMARY KEY(`obj`, `start_offset`)
);
--> statement-breakpoint
CREATE TABLE `allocation_log` (
	`obj` text PRIMARY KEY NOT NULL,
	`placement_id` text NOT NULL,
	`generation` integer NOT NULL,
	`stream_base` integer NOT NULL,
	`end_offset` integer NOT NULL
);
