CREATE TABLE `usage_key_months` (
	`organization_id` text NOT NULL,
	`month` integer NOT NULL,
	`key_id` text NOT NULL,
	`model` text NOT NULL,
	`tokens` integer NOT NULL,
	PRIMARY KEY(`organization_id`, `month`, `key_id`, `model`)
);
--> statement-breakpoint
INSERT INTO `usage_key_months` (`organization_id`, `month`, `key_id`, `model`, `tokens`)
SELECT `organization_id`,
       CAST(strftime('%Y', `hour` * 3600, 'unixepoch') AS INTEGER) * 12 + CAST(strftime('%m', `hour` * 3600, 'unixepoch') AS INTEGER) - 1,
       `key_id`, `model`, sum(`tokens`)
FROM `usage_hours`
GROUP BY 1, 2, 3, 4;
