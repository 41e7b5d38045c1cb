ALTER TABLE `run_records` ADD `delivered_generation` integer;--> statement-breakpoint
ALTER TABLE `usage_reservations` ADD `expires_at_ms` integer DEFAULT 0 NOT NULL;