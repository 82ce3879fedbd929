import type { Static } from "@sinclair/typebox";
import type { SafetyRuleSchema } from "./schema";

/**
 * The red-line rules Sluice ships with: a small starting point, meant to be replaced by the operator's own
 * `[[safety.rules]]`. They aim at requests for operational help with mass-casualty harm, not at discussion of the
 * topics, and they map the OpenAI moderation categories an external checker reports.
 */
export const defaultSafetyRules: Static<typeof SafetyRuleSchema>[] = [
  {
    id: "RL-1",
    name: "Chemical and biological weapons",
    patterns: [
      "(?i)\\b(synthesi[sz]e|synthesis of|produce|manufacture|weaponi[sz]e|make)\\b[^.?!]{0,80}\\b(sarin|tabun|soman|vx nerve|nerve agents?|novichok|mustard gas|anthrax spores|botulinum toxin|ricin)\\b",
      "(?i)\\b(sarin|tabun|soman|nerve agents?|novichok|ricin|botulinum toxin)\\b[^.?!]{0,80}\\b(synthes\\w*|production|step[- ]by[- ]step|recipe|precursors?)\\b",
    ],
    categories: [],
  },
  {
    id: "RL-2",
    name: "Nuclear and radiological weapons",
    patterns: [
      "(?i)\\b(build|assemble|make|design)\\b[^.?!]{0,60}\\b(nuclear (bomb|weapon|device)|dirty bomb|radiological dispersal device|implosion lens)\\b",
    ],
    categories: [],
  },
  {
    id: "RL-3",
    name: "Sexual content involving minors",
    patterns: ["(?i)\\b(sexual|erotic|explicit|nude)\\b[^.?!]{0,40}\\b(child|children|minors?|underage|preteen)\\b"],
    categories: ["sexual/minors"],
  },
  {
    id: "RL-4",
    name: "Instructions for violent attacks",
    patterns: ["(?i)\\b(how to|instructions? (for|to)|plan to)\\b[^.?!]{0,60}\\b(bomb a|mass shooting|kill as many)\\b"],
    categories: ["violence/graphic", "illicit/violent"],
  },
];
