ALTER TABLE `host_connection_commands` ADD `client_candidates_json` text;--> statement-breakpoint
ALTER TABLE `host_connection_commands` ADD `client_candidate_updates` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `connection` ADD `host_id` text;