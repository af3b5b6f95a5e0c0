"""Writes the benchmark workloads (copy-heavy, open-ended, collapse, shifting stream) as JSONL."""
import json
texts = [
 "The old lighthouse stood on the edge of the cliff, its white paint peeling in the salty wind. Every night the keeper climbed the hundred and twelve steps to light the lamp.",
 "Preheat the oven to 180 degrees. Mix the flour, sugar and a pinch of salt in a large bowl. Add the eggs one at a time, then pour in the melted butter and stir until smooth.",
 "The meeting is moved to Thursday at ten in room four. Please bring the draft budget, the staffing plan and your notes from the customer visit last week.",
 "Our store opens at nine on weekdays and at ten on Saturdays. We are closed on Sundays and public holidays. Returns are accepted within thirty days with a receipt.",
 "The river rises in the northern hills and runs for two hundred kilometres to the sea. Three bridges cross it in the old town, the oldest built of grey stone in 1420.",
 "To reset the router, hold the small button on the back for ten seconds until the light turns orange. Wait two minutes, then connect again with the password on the label.",
 "The train to the coast leaves from platform six at eight fifteen. It stops at Milford, Ashby and Port Evan, and the journey takes about two hours and twenty minutes.",
 "Water the seedlings every morning and keep them in a bright place away from direct afternoon sun. When they have four leaves, move them into larger pots with fresh soil.",
 "The library will be closed for repairs from the first to the fifteenth of March. Books can be returned in the box by the side door, and loans will be extended automatically.",
 "Each player starts with seven cards. On your turn, draw one card and play a card of the same colour or number. The first player with no cards left wins the round.",
 "The museum's new wing holds paintings from the nineteenth century, a room of old maps and a small cafe. Entry is free on the first Sunday of every month.",
 "Add two cups of rice to the pot with four cups of water and a spoon of salt. Bring it to the boil, cover, and let it simmer on low heat for eighteen minutes.",
 "The school trip leaves at seven thirty from the main gate. Children need a packed lunch, a raincoat and comfortable shoes. We will be back by five in the afternoon.",
 "Tickets for the summer concert are on sale now at the town hall. Seats in the front rows cost twenty pounds, and children under twelve get in for half price.",
 "The cat sleeps on the window sill most of the day. In the evening she waits by the door for her dinner, then goes out into the garden until it gets dark.",
 "Please send the signed contract back by Friday. If you have any questions about the terms, call me on my office number and I will go through them with you.",
 "The bakery on the corner sells fresh bread every morning from six. Their rye loaf and the cinnamon buns usually sell out before nine, so come early.",
 "Switch off the lights and close the windows before you leave the office. The last person out must set the alarm with the code on the card in the top drawer.",
 "The path follows the lake for three kilometres, then climbs through the pine forest to the viewpoint. Allow two hours for the round trip and take water with you.",
 "The new bus timetable starts on Monday. Route twelve will run every ten minutes at peak times and every twenty minutes in the evening and at weekends.",
]
forms = ["Repeat the following text exactly, word for word:\n\n{t}", "Copy this paragraph exactly as written:\n\n{t}"]
copy = [{"id": f"copy-{i:02d}", "kind": "copy", "prompt": forms[i % 2].format(t=t)} for i, t in enumerate(texts)]
open_prompts = [
 "Write a short story about a fox who learns to play the violin.",
 "Explain why the sky is blue to a ten-year-old.",
 "Give me some advice for my first day at a new job.",
 "Write a poem about autumn in the city.",
 "What are some good ways to stay focused while studying?",
 "Describe a perfect weekend in the mountains.",
 "Why do people enjoy listening to music?",
 "Write a letter to a friend you have not seen in years.",
 "Tell me about the history of bicycles.",
 "What would you do if you could fly for one day?",
]
open_rows = [{"id": f"open-{i:02d}", "kind": "open", "prompt": p} for i, p in enumerate(open_prompts)]
# collapse: prompts full of repeated material, so prompt lookup finds many matches, but an answer that does not copy it
words = "apple river stone window candle garden silver morning paper engine"
collapse_prompts = [
 f"Here are some words: {words}, {words}, {words}. Ignore them and write a short story about a dragon.",
 f"Notes: the the the the the the the the the, and and and and and. Now explain how rain forms.",
 f"Codes: XK-41 XK-41 XK-41 PL-07 PL-07 PL-07 ZZ-93 ZZ-93 ZZ-93. Forget the codes and describe your favourite food.",
 f"Tags: #sun #sea #sand #sun #sea #sand #sun #sea #sand. Write a poem about winter in the forest.",
]
collapse = [{"id": f"collapse-{i:02d}", "kind": "collapse", "prompt": p} for i, p in enumerate(collapse_prompts)]
def dump(name, rows):
    with open(f"benchmarks/{name}.jsonl", "w") as f:
        for r in rows: f.write(json.dumps(r) + "\n")
# one file per workload for the per-workload bench, and the shifting stream: 10 copy, 10 open, 10 copy
dump("workloads", copy[:4] + open_rows[:4] + collapse)
dump("shift", copy[:10] + open_rows + copy[10:20])
