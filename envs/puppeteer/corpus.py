"""The shipped offline corpus for Puppeteer's ``search`` tool, and the facts behind it.

Seed 003's agents search the web (arXiv, Bing, Wikipedia); here every tool works offline,
so the env ships a small Wikipedia-style corpus written for this project (each document a
title and a few sentences in the style of an encyclopedia stub). It covers what the task
families need: the facts that the MMLU-Pro stand-in asks about (``FACT_GROUPS``, one group
per MMLU-Pro category), the formulas of its computed questions (``FORMULA_DOCS``) and the
algorithms that the SRDD-like specs name (``SOFTWARE_DOCS``). A query that names the
question's key terms ranks the relevant document first (``tests/test_puppeteer_tasks.py``
checks this for every fact), so searching helps an agent that searches well.

``load_corpus`` reads a user's own corpus (JSON Lines of ``{"id", "title", "text"}``) for
runs that want a bigger one. The facts are real-world facts stated in this project's own
words; no text was taken from Wikipedia or another source.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from orchenv.envs.puppeteer.tools import SearchIndex
from orchenv.error import DataError

__all__ = [
    "CORPUS",
    "FACT_GROUPS",
    "FORMULA_DOCS",
    "SOFTWARE_DOCS",
    "Fact",
    "FactGroup",
    "corpus_index",
    "fact_doc_id",
    "load_corpus",
]


@dataclass(frozen=True)
class Fact:
    """One fact: the ``answer``, the ``clue`` that a question names, and the ``doc`` text of
    the corpus document that states it (the document's title is the answer)."""

    answer: str
    clue: str
    doc: str


@dataclass(frozen=True)
class FactGroup:
    """Facts of one MMLU-Pro category that share a question form; each fact's wrong options
    are the other facts' answers, or ``pool`` when the group has a fixed answer set."""

    subject: str
    key: str
    question: str
    facts: tuple[Fact, ...]
    pool: tuple[str, ...] = ()

    def options_pool(self) -> tuple[str, ...]:
        return self.pool or tuple(dict.fromkeys(f.answer for f in self.facts))


def _facts(*rows: tuple[str, str, str]) -> tuple[Fact, ...]:
    return tuple(Fact(*row) for row in rows)


FACT_GROUPS: tuple[FactGroup, ...] = (
    FactGroup(
        "biology",
        "organelle",
        "Which cell structure {clue}?",
        _facts(
            ("mitochondrion", "is the main site of aerobic respiration and ATP production",
             "The mitochondrion is a double-membrane organelle; it is the main site of aerobic "
             "respiration and makes most of the cell's ATP."),
            ("ribosome", "translates messenger RNA into protein",
             "A ribosome is a molecular machine, free in the cytoplasm or bound to the rough "
             "endoplasmic reticulum, that translates messenger RNA into a protein chain."),
            ("chloroplast", "carries out photosynthesis in plant cells",
             "The chloroplast is a plastid of plant and algal cells; it holds chlorophyll and "
             "carries out photosynthesis."),
            ("nucleus", "holds most of the DNA of a eukaryotic cell",
             "The nucleus is the membrane-bound compartment that holds most of the DNA of a "
             "eukaryotic cell and controls gene expression."),
            ("Golgi apparatus", "modifies, sorts and packages proteins for secretion",
             "The Golgi apparatus is a stack of flattened sacs that modifies, sorts and "
             "packages proteins and lipids for secretion or delivery."),
            ("lysosome", "digests worn-out organelles with hydrolytic enzymes",
             "A lysosome is a vesicle filled with hydrolytic enzymes that digests worn-out "
             "organelles, food particles and engulfed bacteria."),
            ("smooth endoplasmic reticulum", "synthesizes lipids and detoxifies drugs",
             "The smooth endoplasmic reticulum is a network of tubules without ribosomes; it "
             "synthesizes lipids and steroids and detoxifies drugs in liver cells."),
            ("central vacuole", "stores water and maintains turgor pressure in plant cells",
             "The central vacuole is a large sac in plant cells that stores water and "
             "maintains turgor pressure against the cell wall."),
            ("centriole", "organizes the spindle fibres during animal cell division",
             "A centriole is a cylinder of microtubules; a pair of them organizes the spindle "
             "fibres during animal cell division."),
            ("cell wall", "is the rigid cellulose layer outside the membrane of plant cells",
             "The cell wall is a rigid layer outside the membrane; in plant cells it is made "
             "of cellulose and gives the cell its shape."),
            ("peroxisome", "breaks down fatty acids and hydrogen peroxide",
             "A peroxisome is a small organelle that breaks down very long fatty acids and "
             "turns toxic hydrogen peroxide into water and oxygen."),
            ("nucleolus", "assembles ribosomal subunits inside the nucleus",
             "The nucleolus is a dense region inside the nucleus where ribosomal RNA is made "
             "and ribosomal subunits are assembled."),
        ),
    ),
    FactGroup(
        "health",
        "deficiency",
        "A deficiency of which nutrient causes {clue}?",
        _facts(
            ("vitamin C", "scurvy, with bleeding gums and poor wound healing",
             "Vitamin C (ascorbic acid) is needed to make collagen; its deficiency causes "
             "scurvy, with bleeding gums and poor wound healing."),
            ("vitamin D", "rickets, soft and bent bones in children",
             "Vitamin D helps the gut absorb calcium; its deficiency causes rickets in "
             "children, with soft and bent bones, and osteomalacia in adults."),
            ("thiamine (vitamin B1)", "beriberi, with nerve damage and heart failure",
             "Thiamine, vitamin B1, is a coenzyme of carbohydrate metabolism; its deficiency "
             "causes beriberi, with nerve damage and heart failure."),
            ("niacin (vitamin B3)", "pellagra, with dermatitis, diarrhoea and dementia",
             "Niacin, vitamin B3, is part of NAD; its deficiency causes pellagra, known for "
             "dermatitis, diarrhoea and dementia."),
            ("vitamin A", "night blindness and dry eyes",
             "Vitamin A (retinol) forms the visual pigment rhodopsin; its deficiency causes "
             "night blindness and dry eyes (xerophthalmia)."),
            ("vitamin B12", "pernicious anaemia with large red blood cells",
             "Vitamin B12 (cobalamin) is needed for DNA synthesis in blood cells; its "
             "deficiency causes pernicious anaemia with large red blood cells."),
            ("folate (vitamin B9)", "neural tube defects such as spina bifida in a fetus",
             "Folate, vitamin B9, is needed for cell division; a deficiency in pregnancy "
             "causes neural tube defects such as spina bifida in the fetus."),
            ("vitamin K", "impaired blood clotting and bleeding in newborns",
             "Vitamin K activates clotting factors in the liver; its deficiency causes "
             "impaired blood clotting and bleeding in newborns."),
            ("iodine", "goitre, a swelling of the thyroid gland",
             "Iodine is built into the thyroid hormones; its deficiency causes goitre, a "
             "swelling of the thyroid gland, and cretinism in children."),
            ("iron", "microcytic anaemia with small pale red blood cells",
             "Iron is the core of haemoglobin; its deficiency causes microcytic anaemia, with "
             "small pale red blood cells, fatigue and weakness."),
            ("riboflavin (vitamin B2)", "cracks at the corners of the mouth and a sore tongue",
             "Riboflavin, vitamin B2, forms the coenzymes FAD and FMN; its deficiency causes "
             "cracks at the corners of the mouth and a sore tongue."),
        ),
    ),
    FactGroup(
        "philosophy",
        "author",
        "Which philosopher wrote {clue}?",
        _facts(
            ("Immanuel Kant", "the Critique of Pure Reason",
             "Immanuel Kant was a German philosopher of the Enlightenment who wrote the "
             "Critique of Pure Reason (1781) on the limits of knowledge."),
            ("Plato", "the Republic, with its allegory of the cave",
             "Plato was an Athenian philosopher, student of Socrates, who wrote the Republic, "
             "a dialogue on justice that contains the allegory of the cave."),
            ("Aristotle", "the Nicomachean Ethics",
             "Aristotle was a Greek philosopher, student of Plato, who wrote the Nicomachean "
             "Ethics on virtue and the good life."),
            ("René Descartes", "Meditations on First Philosophy",
             "René Descartes was a French philosopher and mathematician who wrote Meditations "
             "on First Philosophy and argued 'I think, therefore I am'."),
            ("Thomas Hobbes", "Leviathan, on the social contract and the sovereign",
             "Thomas Hobbes was an English philosopher who wrote Leviathan (1651), arguing for "
             "a social contract and an absolute sovereign."),
            ("John Locke", "Two Treatises of Government",
             "John Locke was an English philosopher who wrote Two Treatises of Government, on "
             "natural rights to life, liberty and property."),
            ("David Hume", "A Treatise of Human Nature",
             "David Hume was a Scottish empiricist philosopher who wrote A Treatise of Human "
             "Nature and questioned causation and induction."),
            ("John Stuart Mill", "On Liberty, with its harm principle",
             "John Stuart Mill was an English utilitarian philosopher who wrote On Liberty "
             "(1859), which states the harm principle."),
            ("Friedrich Nietzsche", "Thus Spoke Zarathustra",
             "Friedrich Nietzsche was a German philosopher who wrote Thus Spoke Zarathustra "
             "and introduced the idea of the Übermensch."),
            ("Baruch Spinoza", "the Ethics, demonstrated in geometrical order",
             "Baruch Spinoza was a Dutch rationalist philosopher whose Ethics is demonstrated "
             "in geometrical order from definitions and axioms."),
            ("Søren Kierkegaard", "Fear and Trembling, about Abraham and faith",
             "Søren Kierkegaard was a Danish philosopher, often called the first "
             "existentialist, who wrote Fear and Trembling about Abraham and faith."),
            ("Jean-Paul Sartre", "Being and Nothingness",
             "Jean-Paul Sartre was a French existentialist philosopher who wrote Being and "
             "Nothingness (1943) on freedom and bad faith."),
            ("Ludwig Wittgenstein", "the Tractatus Logico-Philosophicus",
             "Ludwig Wittgenstein was an Austrian philosopher who wrote the Tractatus "
             "Logico-Philosophicus on logic, language and the limits of what can be said."),
        ),
    ),
    FactGroup(
        "psychology",
        "psychologist",
        "Which psychologist is best known for {clue}?",
        _facts(
            ("Abraham Maslow", "the hierarchy of needs topped by self-actualization",
             "Abraham Maslow was an American humanistic psychologist best known for the "
             "hierarchy of needs, topped by self-actualization."),
            ("Ivan Pavlov", "classical conditioning of dogs salivating at a bell",
             "Ivan Pavlov was a Russian physiologist who discovered classical conditioning: "
             "dogs learned to salivate at a bell that signalled food."),
            ("B. F. Skinner", "operant conditioning with reinforcement in a box",
             "B. F. Skinner was an American behaviourist who studied operant conditioning, "
             "shaping behaviour by reinforcement in the operant chamber or Skinner box."),
            ("Jean Piaget", "the four stages of cognitive development in children",
             "Jean Piaget was a Swiss psychologist who described four stages of cognitive "
             "development in children, from sensorimotor to formal operational."),
            ("Stanley Milgram", "experiments on obedience to authority with electric shocks",
             "Stanley Milgram was an American social psychologist whose experiments on "
             "obedience to authority had subjects give apparent electric shocks."),
            ("Sigmund Freud", "psychoanalysis and the id, ego and superego",
             "Sigmund Freud was an Austrian neurologist who founded psychoanalysis and "
             "divided the mind into the id, ego and superego."),
            ("Albert Bandura", "social learning theory and the Bobo doll experiment",
             "Albert Bandura was a Canadian-American psychologist known for social learning "
             "theory and the Bobo doll experiment on imitated aggression."),
            ("Erik Erikson", "eight stages of psychosocial development",
             "Erik Erikson was a German-American psychoanalyst who proposed eight stages of "
             "psychosocial development across the life span."),
            ("Lev Vygotsky", "the zone of proximal development",
             "Lev Vygotsky was a Soviet psychologist who introduced the zone of proximal "
             "development, what a learner can do with guidance."),
            ("Leon Festinger", "cognitive dissonance theory",
             "Leon Festinger was an American social psychologist who proposed cognitive "
             "dissonance theory, the discomfort of holding conflicting beliefs."),
            ("Hermann Ebbinghaus", "the forgetting curve of memory",
             "Hermann Ebbinghaus was a German psychologist who measured memory with nonsense "
             "syllables and described the forgetting curve."),
            ("Harry Harlow", "attachment experiments with infant rhesus monkeys",
             "Harry Harlow was an American psychologist whose attachment experiments gave "
             "infant rhesus monkeys a wire mother and a cloth mother."),
        ),
    ),
    FactGroup(
        "history",
        "year",
        "In which year {clue}?",
        _facts(
            ("1453", "did Constantinople fall to the Ottoman Empire",
             "The fall of Constantinople: in 1453 the Ottoman Empire under Mehmed II captured "
             "Constantinople, ending the Byzantine Empire."),
            ("1215", "did King John of England seal Magna Carta",
             "Magna Carta is the charter that King John of England sealed at Runnymede in "
             "1215, limiting royal power."),
            ("1789", "did the storming of the Bastille start the French Revolution",
             "The storming of the Bastille in Paris on 14 July 1789 marked the start of the "
             "French Revolution."),
            ("1492", "did Christopher Columbus first reach the Americas",
             "Christopher Columbus sailed for Spain and first reached the Americas in 1492, "
             "landing in the Bahamas."),
            ("1776", "was the United States Declaration of Independence adopted",
             "The United States Declaration of Independence was adopted by the Continental "
             "Congress on 4 July 1776."),
            ("1066", "was the Battle of Hastings fought",
             "The Battle of Hastings was fought in 1066; William of Normandy defeated King "
             "Harold and began the Norman conquest of England."),
            ("1815", "was Napoleon defeated at the Battle of Waterloo",
             "The Battle of Waterloo in 1815 ended with the defeat of Napoleon by Wellington "
             "and Blücher."),
            ("1914", "was Archduke Franz Ferdinand assassinated in Sarajevo",
             "Archduke Franz Ferdinand was assassinated in Sarajevo in June 1914, setting off "
             "the First World War."),
            ("1969", "did Apollo 11 land the first humans on the Moon",
             "Apollo 11 landed the first humans on the Moon in July 1969; Neil Armstrong and "
             "Buzz Aldrin walked on the surface."),
            ("1989", "did the Berlin Wall fall",
             "The Berlin Wall, built in 1961, fell in November 1989 when East Germany opened "
             "its border crossings."),
            ("1517", "did Martin Luther post the Ninety-five Theses",
             "Martin Luther posted the Ninety-five Theses in Wittenberg in 1517, starting the "
             "Protestant Reformation."),
            ("1945", "did the Second World War end",
             "The Second World War ended in 1945, with the surrender of Germany in May and of "
             "Japan in September."),
        ),
    ),
    FactGroup(
        "law",
        "latin-term",
        "Which Latin legal term means {clue}?",
        _facts(
            ("habeas corpus", "a writ requiring a detained person to be brought before a court",
             "Habeas corpus is a writ requiring that a detained person be brought before a "
             "court, so that the lawfulness of the detention can be tested."),
            ("mens rea", "the guilty mind, the mental element of a crime",
             "Mens rea is the guilty mind: the mental element of a crime, such as intention "
             "or recklessness, that the prosecution must prove."),
            ("actus reus", "the guilty act, the physical element of a crime",
             "Actus reus is the guilty act: the physical element of a crime, a voluntary act "
             "or omission."),
            ("stare decisis", "standing by decided cases, the doctrine of precedent",
             "Stare decisis means to stand by decided cases; it is the doctrine of precedent "
             "that binds courts to earlier rulings."),
            ("res judicata", "a matter already judged that cannot be litigated again",
             "Res judicata is a matter already judged: a final judgment bars the same parties "
             "from litigating the same claim again."),
            ("pro bono", "legal work done for the public good without charge",
             "Pro bono work is legal work done for the public good without charge to the "
             "client."),
            ("ultra vires", "an act beyond the powers granted by law",
             "Ultra vires describes an act beyond the powers granted by law or by a "
             "company's constitution; such acts may be void."),
            ("amicus curiae", "a friend of the court who is not a party but offers information",
             "An amicus curiae is a friend of the court: someone who is not a party to a case "
             "but offers information or a brief."),
            ("caveat emptor", "let the buyer beware",
             "Caveat emptor, let the buyer beware, is the principle that the buyer bears the "
             "risk of checking the quality of goods."),
            ("obiter dictum", "a remark in a judgment that is not essential to the decision",
             "An obiter dictum is a remark in a judgment that is not essential to the "
             "decision and so does not bind later courts."),
            ("ratio decidendi", "the legal reason on which a decision rests",
             "The ratio decidendi is the legal reason on which a decision rests; it is the "
             "binding part of a precedent."),
            ("subpoena", "an order to appear in court under penalty",
             "A subpoena is an order to appear in court or produce evidence under penalty "
             "for failing to comply."),
        ),
    ),
    FactGroup(
        "chemistry",
        "element",
        "Which element has the chemical symbol {clue}?",
        _facts(
            ("iron", "Fe", "Iron is a metal with chemical symbol Fe (from Latin ferrum) and "
             "atomic number 26; it is the main metal of steel."),
            ("gold", "Au", "Gold is a precious metal with chemical symbol Au (from Latin "
             "aurum) and atomic number 79."),
            ("silver", "Ag", "Silver is a metal with chemical symbol Ag (from Latin argentum) "
             "and atomic number 47; it conducts electricity best of all metals."),
            ("lead", "Pb", "Lead is a heavy metal with chemical symbol Pb (from Latin "
             "plumbum) and atomic number 82."),
            ("sodium", "Na", "Sodium is an alkali metal with chemical symbol Na (from Latin "
             "natrium) and atomic number 11."),
            ("mercury", "Hg", "Mercury is a metal, liquid at room temperature, with chemical "
             "symbol Hg (from Greek hydrargyrum) and atomic number 80."),
            ("tin", "Sn", "Tin is a metal with chemical symbol Sn (from Latin stannum) and "
             "atomic number 50; bronze is an alloy of copper and tin."),
            ("copper", "Cu", "Copper is a reddish metal with chemical symbol Cu (from Latin "
             "cuprum) and atomic number 29."),
            ("antimony", "Sb", "Antimony is a metalloid with chemical symbol Sb (from Latin "
             "stibium) and atomic number 51."),
            ("zinc", "Zn", "Zinc is a metal with chemical symbol Zn and atomic number 30; it "
             "is used to galvanize steel."),
            ("magnesium", "Mg", "Magnesium is an alkaline earth metal with chemical symbol "
             "Mg and atomic number 12; it burns with a bright white flame."),
            ("chlorine", "Cl", "Chlorine is a halogen with chemical symbol Cl and atomic "
             "number 17; it is a yellow-green gas."),
        ),
    ),
    FactGroup(
        "economics",
        "economist",
        "Which economist is most associated with {clue}?",
        _facts(
            ("Adam Smith", "the invisible hand of the market",
             "Adam Smith was a Scottish economist whose Wealth of Nations described the "
             "invisible hand of the market and the division of labour."),
            ("David Ricardo", "the theory of comparative advantage in trade",
             "David Ricardo was a British economist who developed the theory of comparative "
             "advantage in international trade."),
            ("John Maynard Keynes", "managing aggregate demand with government spending",
             "John Maynard Keynes was a British economist whose General Theory argued for "
             "managing aggregate demand with government spending in a slump."),
            ("Milton Friedman", "monetarism and control of the money supply",
             "Milton Friedman was an American economist who led monetarism, stressing control "
             "of the money supply to fight inflation."),
            ("Thomas Malthus", "population growing faster than the food supply",
             "Thomas Malthus was an English economist who argued that population grows "
             "faster than the food supply."),
            ("Karl Marx", "surplus value and the labour theory of value in Das Kapital",
             "Karl Marx was a German economist and philosopher whose Das Kapital analysed "
             "surplus value and the labour theory of value."),
            ("Joseph Schumpeter", "creative destruction by entrepreneurs",
             "Joseph Schumpeter was an Austrian economist who described creative destruction, "
             "innovation by entrepreneurs that replaces old industries."),
            ("Vilfredo Pareto", "an allocation where no one can gain without another losing",
             "Vilfredo Pareto was an Italian economist; an allocation where no one can gain "
             "without another losing is called Pareto efficient."),
            ("Friedrich Hayek", "the knowledge problem of central planning",
             "Friedrich Hayek was an Austrian economist who argued that prices solve the "
             "knowledge problem that central planning cannot; he wrote The Road to Serfdom."),
            ("John Nash", "the equilibrium of non-cooperative games",
             "John Nash was an American mathematician whose equilibrium of non-cooperative "
             "games, where no player gains by deviating alone, bears his name."),
            ("Arthur Okun", "the rule linking unemployment to the output gap",
             "Arthur Okun was an American economist whose law states a rule linking "
             "unemployment to the output gap."),
            ("Alfred Marshall", "the partial equilibrium of supply and demand curves",
             "Alfred Marshall was a British economist whose Principles of Economics drew "
             "supply and demand curves and studied partial equilibrium."),
        ),
    ),
    FactGroup(
        "computer science",
        "complexity",
        "What is the worst-case time complexity of {clue}?",
        _facts(
            ("O(log n)", "binary search in a sorted array",
             "Binary search finds a value in a sorted array by halving the interval; its "
             "worst-case time is O(log n)."),
            ("O(n^2)", "bubble sort",
             "Bubble sort repeatedly swaps adjacent elements that are out of order; its "
             "worst-case time is O(n^2)."),
            ("O(n log n)", "merge sort",
             "Merge sort splits a list in halves, sorts them recursively and merges them; "
             "its worst-case time is O(n log n)."),
            ("O(n)", "linear search in an unsorted list",
             "Linear search checks each element of an unsorted list in turn; its worst-case "
             "time is O(n)."),
            ("O(1)", "reading an array element by its index",
             "Reading an array element by its index is random access, a constant-time "
             "operation: O(1)."),
            ("O(2^n)", "the naive recursive Fibonacci function",
             "The naive recursive Fibonacci function calls itself twice per level and takes "
             "exponential time, O(2^n)."),
            ("O(n!)", "brute-force travelling salesman search over all tours",
             "Brute-force travelling salesman search tries every tour of the cities, a "
             "factorial number of permutations: O(n!)."),
            ("O(n^3)", "the Floyd-Warshall all-pairs shortest path algorithm",
             "The Floyd-Warshall algorithm finds all-pairs shortest paths with three nested "
             "loops over the vertices: O(n^3)."),
            ("O(sqrt(n))", "trial division primality testing of n",
             "Trial division primality testing divides n by every integer up to its square "
             "root, O(sqrt(n)) divisions."),
        ),
        pool=(
            "O(1)", "O(log n)", "O(sqrt(n))", "O(n)", "O(n log n)", "O(n^2)", "O(n^2 log n)",
            "O(n^3)", "O(2^n)", "O(n!)",
        ),
    ),
    FactGroup(
        "physics",
        "si-unit",
        "What is the SI unit of {clue}?",
        _facts(
            ("newton", "force", "The newton is the SI unit of force: one kilogram metre per "
             "second squared, named after Isaac Newton."),
            ("joule", "energy and work", "The joule is the SI unit of energy and work: one "
             "newton acting over one metre."),
            ("watt", "power", "The watt is the SI unit of power: one joule per second, named "
             "after James Watt."),
            ("coulomb", "electric charge", "The coulomb is the SI unit of electric charge: "
             "one ampere flowing for one second."),
            ("ohm", "electrical resistance", "The ohm is the SI unit of electrical "
             "resistance: one volt per ampere."),
            ("farad", "capacitance", "The farad is the SI unit of capacitance: one coulomb "
             "per volt, named after Michael Faraday."),
            ("henry", "inductance", "The henry is the SI unit of inductance, named after "
             "Joseph Henry."),
            ("weber", "magnetic flux", "The weber is the SI unit of magnetic flux: one volt "
             "second."),
            ("hertz", "frequency", "The hertz is the SI unit of frequency: one cycle per "
             "second."),
            ("pascal", "pressure", "The pascal is the SI unit of pressure: one newton per "
             "square metre."),
            ("tesla", "magnetic flux density", "The tesla is the SI unit of magnetic flux "
             "density: one weber per square metre."),
            ("volt", "electric potential difference", "The volt is the SI unit of electric "
             "potential difference: one joule per coulomb."),
            ("becquerel", "radioactive activity", "The becquerel is the SI unit of "
             "radioactive activity: one decay per second."),
        ),
    ),
    FactGroup(
        "other",
        "capital",
        "What is the capital city of {clue}?",
        _facts(
            ("Canberra", "Australia", "Canberra is the capital city of Australia, a planned "
             "city chosen as a compromise between Sydney and Melbourne."),
            ("Ottawa", "Canada", "Ottawa is the capital city of Canada, on the Ottawa River "
             "in Ontario."),
            ("Brasília", "Brazil", "Brasília is the capital city of Brazil, a planned city "
             "inaugurated in 1960."),
            ("Ankara", "Turkey", "Ankara is the capital city of Turkey; it replaced Istanbul "
             "as the capital in 1923."),
            ("Abuja", "Nigeria", "Abuja is the capital city of Nigeria; it replaced Lagos in "
             "1991."),
            ("Bern", "Switzerland", "Bern is the federal city and de facto capital city of "
             "Switzerland."),
            ("Wellington", "New Zealand", "Wellington is the capital city of New Zealand, at "
             "the south of the North Island."),
            ("Islamabad", "Pakistan", "Islamabad is the capital city of Pakistan, built in "
             "the 1960s to replace Karachi."),
            ("Rabat", "Morocco", "Rabat is the capital city of Morocco, on the Atlantic "
             "coast."),
            ("Astana", "Kazakhstan", "Astana is the capital city of Kazakhstan; it replaced "
             "Almaty in 1997."),
            ("Naypyidaw", "Myanmar", "Naypyidaw is the capital city of Myanmar; it replaced "
             "Yangon in 2006."),
            ("Hanoi", "Vietnam", "Hanoi is the capital city of Vietnam, on the Red River."),
        ),
    ),
)  # fmt: skip

#: documents behind the computed MMLU-Pro stand-in questions (one per question generator)
FORMULA_DOCS: dict[str, tuple[str, str]] = {
    "math/remainder": ("Modular arithmetic", "The remainder of a division of an integer n by "
                       "a positive integer k is n mod k, between 0 and k - 1."),
    "math/gcd": ("Greatest common divisor", "The greatest common divisor of two integers is "
                 "the largest integer dividing both; the Euclidean algorithm finds it."),
    "math/binomial": ("Binomial coefficient", "The binomial coefficient C(n, k) counts the "
                      "ways to choose k items from n: n! / (k! (n - k)!)."),
    "math/series": ("Arithmetic series", "The sum of an arithmetic series of n terms with "
                    "first term a and common difference d is n (2a + (n - 1) d) / 2."),
    "physics/kinetic": ("Kinetic energy", "The kinetic energy of a body of mass m moving at "
                        "speed v is one half m v squared, in joules."),
    "engineering/ohm": ("Ohm's law", "Ohm's law: the voltage across a resistor equals the "
                        "current times the resistance, V = I R."),
    "engineering/power": ("Electric power", "The electric power drawn by a device equals "
                          "the voltage times the current, P = V I, in watts."),
    "engineering/stress": ("Stress (mechanics)", "Normal stress in a bar equals the axial "
                           "force divided by the cross-sectional area, F / A, in pascals."),
    "chemistry/moles": ("Amount of substance", "The amount of substance in moles equals the "
                        "mass in grams divided by the molar mass in grams per mole."),
    "economics/real-gdp": ("Real GDP", "Real GDP equals nominal GDP divided by the GDP "
                           "deflator, times 100; it removes the effect of price changes."),
    "business/interest": ("Simple interest", "Simple interest on a principal P at annual "
                          "rate r percent for t years is P r t / 100."),
    "business/break-even": ("Break-even point", "The break-even quantity is the fixed cost "
                            "divided by the contribution margin, price minus variable cost "
                            "per unit."),
    "computer science/binary": ("Binary number", "A binary numeral is read in base two: "
                                "each digit is worth twice the digit to its right; 1011 in "
                                "binary is 11 in decimal."),
}  # fmt: skip

#: documents behind the SRDD-like software specs (``tasks.SRDD_SPECS``)
SOFTWARE_DOCS: dict[str, tuple[str, str]] = {
    "software/caesar": ("Caesar cipher", "A Caesar cipher shifts each letter of the alphabet "
                        "by a fixed number of places, wrapping from Z to A; case is kept and "
                        "other characters are unchanged. Decoding shifts back."),
    "software/run-length": ("Run-length encoding", "Run-length encoding stores a run of the "
                            "same character as the character followed by the run's length, "
                            "so aaabcc becomes a3b1c2 or, omitting ones, a3bc2."),
    "software/roman": ("Roman numerals", "Roman numerals write numbers with I V X L C D M; "
                       "subtractive pairs IV, IX, XL, XC, CD, CM; 1994 is MCMXCIV."),
    "software/isbn": ("ISBN-10", "An ISBN-10 is valid when the sum of each digit times its "
                      "weight, 10 down to 1, is divisible by 11; the last digit may be X for "
                      "10; hyphens are ignored."),
    "software/luhn": ("Luhn algorithm", "The Luhn algorithm checks card numbers: from the "
                      "right, double every second digit, subtract 9 from results above 9, and "
                      "the total must be divisible by 10."),
    "software/bank": ("Bank account", "A bank account keeps a balance; deposits add, "
                      "withdrawals subtract, and an overdraft limit caps how far the balance "
                      "may go below zero."),
    "software/inventory": ("Inventory management", "An inventory records the stock count of "
                           "each item; receiving adds stock, shipping removes it, and items at "
                           "or below a reorder threshold are low on stock."),
    "software/word-frequency": ("Word frequency", "A word frequency count lowercases a text, "
                                "splits it into words and counts them; the most frequent come "
                                "first, ties in alphabetical order."),
    "software/fizzbuzz": ("Fizz buzz", "Fizz buzz is a counting game: multiples of one "
                          "number are replaced by a word, multiples of another by a second "
                          "word, and multiples of both by the two words joined."),
    "software/temperature": ("Temperature conversion", "Celsius to Fahrenheit is C times 9/5 "
                             "plus 32; Kelvin is Celsius plus 273.15."),
    "software/priority-queue": ("Priority queue", "A priority queue serves the item of "
                                "highest priority first; a stable one serves equal priorities "
                                "in insertion order (first in, first out)."),
    "software/grades": ("Letter grade", "A grading scale maps a numeric score to a letter "
                        "grade by cut-offs, for example A from 90, B from 80, C from 70."),
}  # fmt: skip


def fact_doc_id(group: FactGroup, fact: Fact) -> str:
    """The corpus id of a fact's document: ``subject/group/answer``."""
    return f"{group.subject}/{group.key}/{fact.answer}"


def _build() -> dict[str, str]:
    docs: dict[str, str] = {}
    for group in FACT_GROUPS:
        for fact in group.facts:
            docs[fact_doc_id(group, fact)] = f"{fact.answer}. {fact.doc}"
    for table in (FORMULA_DOCS, SOFTWARE_DOCS):
        for doc_id, (title, text) in table.items():
            docs[doc_id] = f"{title}. {text}"
    return docs


#: the shipped corpus: ``{doc_id: "Title. text"}``
CORPUS: dict[str, str] = _build()


@lru_cache(maxsize=1)
def corpus_index() -> SearchIndex:
    """The BM25 index of ``CORPUS``, built once per process (an index is read-only, so every
    env and fork can share it)."""
    return SearchIndex(CORPUS)


def load_corpus(path: str | os.PathLike[str]) -> dict[str, str]:
    """A corpus from a JSON Lines file of ``{"id", "title", "text"}`` objects (``title``
    optional), as ``{id: "Title. text"}``; pass it to ``tools.SearchIndex``. Raises
    ``DataError`` naming the line for a malformed file."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{file}: no such corpus file; expected JSON Lines of id/title/text")
    docs: dict[str, str] = {}
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{file}, line {lineno}: malformed JSON ({exc.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise DataError(f"{file}, line {lineno}: expected an object with a 'text' string")
            doc_id = str(row.get("id", lineno))
            title = row.get("title")
            docs[doc_id] = f"{title}. {row['text']}" if title else row["text"]
    if not docs:
        raise DataError(f"{file}: the corpus is empty")
    return docs
