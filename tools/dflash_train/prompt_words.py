"""The word lists the prompt templates draw from (authored for this tool)."""

COUNTRIES = (
    "France", "Japan", "Brazil", "Canada", "Egypt", "India", "Kenya", "Mexico", "Norway", "Peru",
    "Italy", "Spain", "Germany", "Australia", "Argentina", "Chile", "China", "Greece", "Ireland",
    "Portugal", "Sweden", "Turkey", "Vietnam", "Thailand", "Morocco", "Nigeria", "Poland",
    "Finland", "Iceland", "New Zealand", "South Korea", "Indonesia", "Colombia", "Austria",
)
CONCEPTS = (
    "photosynthesis", "gravity", "inflation", "the water cycle", "machine learning", "democracy",
    "evolution", "supply and demand", "the immune system", "black holes", "climate change",
    "compound interest", "electricity", "the internet", "vaccines", "plate tectonics", "DNA",
    "renewable energy", "blockchain", "the scientific method", "recursion", "encryption",
    "the greenhouse effect", "nuclear fission", "probability", "opportunity cost", "tides",
    "the stock market", "antibiotics", "sleep", "memory in the brain", "rainbows", "volcanoes",
    "magnetism", "the speed of light", "cloud computing", "operating systems", "friction",
    "the French Revolution", "the Roman Empire", "the printing press", "the Renaissance",
    "photosynthesis in algae", "ocean currents", "earthquakes", "the moon's phases", "batteries",
    "solar panels", "neural networks", "taxes", "interest rates", "global trade", "bacteria",
)
AUDIENCES = ("a ten-year-old", "a beginner", "a high school student", "someone with no science "
             "background", "a busy manager", "a curious grandparent")
TASKS = (
    "bake bread at home", "change a flat tire", "start a vegetable garden", "learn a new language",
    "improve my sleep", "write a good resume", "save money each month", "train for a 5k run",
    "make a cup of pour-over coffee", "clean a laptop keyboard", "prepare for a job interview",
    "set up a home Wi-Fi network", "take better photos with my phone", "organize my closet",
    "learn to play the guitar", "cook rice on the stove", "write a cover letter",
    "meditate for the first time", "plan a road trip", "reduce stress at work", "study for exams",
    "make a budget", "repot a plant", "back up my computer", "care for a new puppy",
    "make homemade pizza", "give a short presentation", "fix a leaky faucet", "read more books",
    "start journaling", "paint a room", "brew green tea", "stay focused while working from home",
)
PY_SPECS = (
    "reverses a string", "checks whether a number is prime", "returns the factorial of n",
    "computes the nth Fibonacci number", "counts the vowels in a string", "merges two sorted "
    "lists", "removes duplicates from a list while keeping order", "checks if a string is a "
    "palindrome", "returns the largest element of a list", "flattens a nested list",
    "converts Celsius to Fahrenheit", "computes the average of a list of numbers",
    "finds the second largest number in a list", "counts word frequencies in a text",
    "sorts a list of dictionaries by a key", "checks whether two strings are anagrams",
    "returns the greatest common divisor of two integers", "reads a text file and returns its "
    "lines", "capitalizes the first letter of every word", "computes the sum of the digits of an "
    "integer", "generates all subsets of a list", "implements binary search", "transposes a "
    "matrix given as a list of lists", "validates an email address with a regular expression",
    "returns the n smallest elements of a list", "converts a binary string to an integer",
    "chunks a list into pieces of size k", "finds the longest word in a sentence",
    "implements bubble sort", "counts the lines in a file", "checks if a year is a leap year",
    "rotates a list by k positions", "returns the intersection of two lists", "converts a list "
    "of pairs into a dictionary", "checks whether brackets in a string are balanced", "computes "
    "the median of a list", "returns the most common element of a list", "formats a number with "
    "thousands separators", "splits a sentence into words and sorts them", "computes the "
    "distance between two points", "converts a Roman numeral to an integer", "returns the prime "
    "factors of a number", "implements a simple stack class", "shuffles a list in place",
    "counts the uppercase letters in a string", "returns the running total of a list",
    "checks whether a list is sorted", "computes the power set size of a set", "reverses the "
    "words in a sentence", "generates a random password", "parses a date string",
)
BASH_TASKS = (
    "counts the lines in every .txt file in a folder", "finds all files larger than 100 MB",
    "renames every .jpeg file to .jpg", "shows the ten largest directories", "deletes log files "
    "older than seven days", "prints the current date and time", "lists running processes sorted "
    "by memory", "searches for a word in all Python files", "creates a compressed archive of a "
    "folder", "downloads a file with curl", "shows free disk space", "counts unique lines in a "
    "file", "replaces a word in a file with sed", "prints the last 20 lines of a log",
    "loops over numbers from 1 to 10", "checks whether a file exists", "makes a script executable",
    "shows the size of a folder", "lists files modified today", "extracts a tar.gz archive",
    "counts how many times each IP address appears in a log", "prints the PATH one entry per "
    "line", "copies all .csv files into a backup folder", "shows the memory usage", "kills a "
    "process by name", "lists the users logged in", "prints every line that contains an error",
    "sorts a file numerically", "shows the first five lines of every file", "creates ten empty "
    "files", "checks whether a website is reachable", "finds empty directories", "watches a log "
    "file for new lines", "converts all file names to lowercase", "prints the number of CPU "
    "cores", "shows which process uses a port",
)
SQL_TASKS = (
    "selects all customers from Canada", "counts the orders of each customer", "finds the ten "
    "most expensive products", "lists employees hired after 2020", "computes the average salary "
    "per department", "deletes duplicate rows", "joins orders with customers", "finds products "
    "that were never ordered", "updates the price of one product", "creates a table for blog "
    "posts", "returns the total sales per month", "finds customers with more than five orders",
)
THINGS = (
    "fruits that are high in vitamin C", "famous painters", "programming languages", "board "
    "games for families", "ways to save energy at home", "healthy breakfast ideas", "planets in "
    "the solar system", "tips for better sleep", "countries in South America", "hobbies you can "
    "do indoors", "benefits of regular exercise", "classic novels", "musical instruments",
    "ways to reduce plastic waste", "questions to ask in a job interview", "vegetables that grow "
    "well in pots", "team-building activities", "famous scientists", "rainy day activities",
    "uses of baking soda", "birds found in cities", "study habits", "features of a good website",
    "reasons to learn history", "small business ideas", "things to pack for a camping trip",
    "common job interview mistakes", "ways to be more productive", "foods rich in protein",
    "famous bridges", "animals that live in the Arctic", "ways to learn vocabulary",
)
CHARACTERS = (
    "a lonely robot", "a brave little mouse", "an old lighthouse keeper", "a curious young "
    "astronaut", "a talking cat", "a retired detective", "a shy dragon", "a girl who can hear "
    "plants", "a clumsy wizard", "a baker in a small village", "a lost penguin", "a time-traveling "
    "student", "a friendly ghost", "a street musician", "a knight who is afraid of the dark",
)
PLOTS = (
    "finds a mysterious map", "makes an unexpected friend", "has to save the town", "learns to "
    "fly", "discovers a hidden door", "loses something important", "wins a strange contest",
    "travels to the ocean", "meets their future self", "solves a puzzle", "starts a new job",
)
POEM_FORMS = ("short poem", "haiku", "limerick", "four-line rhyming poem", "free verse poem")
POEM_SUBJECTS = (
    "the sea", "autumn leaves", "a city at night", "friendship", "the first snow", "coffee",
    "the moon", "a summer storm", "an old tree", "time", "mountains", "a quiet morning", "cats",
    "the stars", "spring flowers", "a train journey", "rain on a window", "home",
)
PAIRS = (
    ("cats", "dogs"), ("tea", "coffee"), ("Python", "JavaScript"), ("renting", "buying a home"),
    ("solar power", "wind power"), ("books", "movies"), ("running", "swimming"), ("email",
    "instant messaging"), ("electric cars", "gasoline cars"), ("summer", "winter"), ("a laptop",
    "a desktop computer"), ("city life", "country life"), ("TCP", "UDP"), ("lists", "tuples in "
    "Python"), ("weather", "climate"), ("viruses", "bacteria"), ("stocks", "bonds"), ("RAM",
    "storage"), ("SQL", "NoSQL databases"), ("mitosis", "meiosis"), ("a CV", "a resume"),
    ("baking", "frying"), ("trains", "planes for travel"), ("paper books", "e-readers"),
    ("working from home", "working in an office"), ("Git merge", "Git rebase"), ("Linux",
    "Windows"), ("a savings account", "an index fund"), ("yoga", "weight training"), ("HTTP",
    "HTTPS"), ("classical music", "jazz"),
)
SENTENCES = (
    "The meeting has been moved to Thursday because the manager is sick.",
    "I can't come to the party tonight since I have too much homework.",
    "Our new product is faster, cheaper and easier to use than the old one.",
    "The weather was terrible, so we stayed inside and played cards all day.",
    "Please send me the report before the end of the week.",
    "The restaurant was crowded but the food was absolutely delicious.",
    "He forgot his keys again and had to wait outside for an hour.",
    "Scientists have discovered a new species of frog in the rainforest.",
    "The city plans to build a new park next to the river.",
    "Learning to code takes patience, practice and a lot of curiosity.",
    "The train was late, so I missed the first part of the concert.",
    "Regular exercise improves both physical health and mood.",
    "We need to finish the project soon or the client will be unhappy.",
    "The cat knocked the glass off the table and ran away.",
    "Many people think that summer is the best season for travel.",
    "The library will be closed on Monday for repairs.",
    "She practiced the piano every day and finally won the competition.",
    "The software update fixed several bugs but made the app slower.",
    "Tickets for the show sold out in less than ten minutes.",
    "Drinking enough water is important for staying healthy.",
)
STYLES = ("to sound more formal", "to sound more casual", "in simpler words", "in the passive "
          "voice", "to be more polite", "as a question", "more concisely")
WORDS = (
    "ephemeral", "ubiquitous", "serendipity", "pragmatic", "resilient", "ambiguous", "meticulous",
    "nostalgia", "candid", "benevolent", "eloquent", "frugal", "gregarious", "inevitable",
    "lucid", "mundane", "obsolete", "paradox", "tenacious", "versatile", "empathy", "algorithm",
    "diligent", "cautious", "abundant", "vivid", "humble", "reluctant", "spontaneous",
    "sustainable", "curious", "generous", "skeptical", "thrive", "meander", "innovate",
    "brevity", "integrity", "optimism", "fragile",
)
RECIPIENTS = ("my manager", "a teacher", "a landlord", "a colleague", "a customer", "a friend",
              "a neighbor", "the IT department")
PURPOSES = (
    "asking for a deadline extension", "introducing a new team member", "confirming an order",
    "sharing good news", "asking for a day off", "thanking them for their help",
    "rescheduling a meeting", "reporting a problem", "requesting more information",
    "apologizing for a delay", "inviting them to an event", "following up on a previous message",
)
REVIEWS = (
    "The battery lasts all day and the screen is gorgeous.", "It broke after two days. Waste of "
    "money.", "Decent product, but shipping took forever.", "Best pizza I have had in years!",
    "The staff were rude and the room was dirty.", "Works exactly as described, very happy.",
    "The movie was boring and far too long.", "Great value for the price, would buy again.",
    "Nice design, but the app crashes every hour.", "Friendly service and a cozy atmosphere.",
    "Not worth the hype at all.", "My kids love it and so do I.",
)
NAMES = ("Anna", "Ben", "Carlos", "Dina", "Eli", "Fatima", "George", "Hana", "Ivan", "Julia",
         "Kofi", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "coins", "cards")
JOKE_TOPICS = ("computers", "cats", "math", "coffee", "the ocean", "teachers", "vegetables",
               "space", "music", "the weather", "dogs", "pizza", "robots", "books", "trains",
               "dinosaurs", "the internet", "birds", "winter", "soccer", "chess", "bananas")
