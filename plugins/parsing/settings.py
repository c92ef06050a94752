"""Recipe settings of the `ptb` task and the `tree_beam` decoder (torch-free: `seqxduce plugins` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, setting, setting_like
from seqxduce.search_settings import BeamSettings

# where the linearization writes the words (linearize.py)
WORD_MODES = ("none", "after_leaf", "before_leaf", "as_leaf", "ahead")
# The labels EVALB's COLLINS.prm deletes before scoring, and the Penn Treebank words that always carry one of them
# (wsj_0001-0159: ',' 4,293 times ',', '--' 219 times ':', ...; "'" is POS 56 times and '' 9 times, so it is free).
EVALB_PUNCTUATION_TAGS = ["``", "''", ".", ":", ","]
PTB_PUNCTUATION_WORDS = [",", ".", "?", "!", ":", ";", "--", "-", "...", "``", "`", "''"]
PTB_EITHER_WORDS = ["'"]
# The Penn Treebank's POS tags (Santorini 1990: 36 word tags and 9 of punctuation and symbols), once -NONE- is
# removed with the empty elements; the tags of wsj_0001-0159's leaves are exactly these 45
PTB_POS_TAGS = ["CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP", "NNPS",
                "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN",
                "VBP", "VBZ", "WDT", "WP", "WP$", "WRB", "#", "$", "''", "``", ",", ".", ":", "-LRB-", "-RRB-"]


@dataclass
class PtbSettings(Settings):
    """The Penn Treebank parsing task: which files make each split and how trees become sequences."""

    layout: str = setting("auto", help="flat: wsj_NNNN.mrg in data_dir (the NLTK sample); ldc: "
                                       "[wsj/]SS/wsj_SSNN.mrg (the LDC treebank); auto: ldc if a section "
                                       "folder exists, else flat", choices=("auto", "flat", "ldc"))
    train_files: str = setting("0001-0159", help="training files as wsj_NNNN number ranges, e.g. "
                                                 "'0001-0159' (sample) or '0200-2199' (WSJ sections 02-21)")
    valid_files: str = setting("0160-0179", help="development files, e.g. '0160-0179' (sample) or "
                                                 "'2200-2299' (section 22)")
    test_files: str = setting("", help="test files, e.g. '2300-2399' (section 23); empty = no test split")
    keep_pos_tags: bool = setting(False, help="leaves of the linearization are POS tags instead of the "
                                              "placeholder XX (Vinyals et al. 2015 normalise all tags to XX)")
    collapse_unary: bool = setting(False, help="join unary chains into one label (S+VP) before linearizing; "
                                               "outputs are expanded again before scoring")
    words_in_target: str = setting("none", help="write the words into the target too, so the decoder reads the "
                                                "word it is at (Choe & Charniak 2016): after_leaf = each word after "
                                                "its leaf, '(NP DT The NN cat )NP'; before_leaf = each word before "
                                                "its leaf, '(NP The DT cat NN )NP' (the tag is predicted after "
                                                "reading its word); ahead = each word ahead of its leaf: the "
                                                "first before the tree, each other right after the previous "
                                                "leaf, 'The (NP DT cat NN )NP', so every bracket and tag is "
                                                "chosen having read its word; as_leaf = the word is the leaf "
                                                "(no tags); none = brackets and leaves only. Decode with tree_beam "
                                                "and the same words_in_target, which forces the source words",
                                   choices=WORD_MODES)


@dataclass
class TreeBeamSettings(BeamSettings):
    """Beam search that only produces well-formed linearized trees, with the paper's parsing defaults."""

    beam: int = setting_like(BeamSettings, "beam", 21, help="beam size (paper, parsing: 21)")
    alpha: float = setting_like(BeamSettings, "alpha", 0.3, help="GNMT length penalty ((5+len)/6)^alpha "
                                                                 "(paper, parsing: 0.3)")
    max_len_b: int = setting_like(BeamSettings, "max_len_b", 300, help="maximum output length offset (paper, "
                                                                      "parsing: input length + 300)")
    constrained: bool = setting(True, help="false = the same beam search without the tree constraint (to measure "
                                           "what it adds on one checkpoint)")
    leaf_tokens: list[str] = setting([], help="vocabulary entries allowed as leaves; empty = with the words in "
                                              "the target (after_leaf, before_leaf, ahead) the Penn Treebank's "
                                              "45 POS tags and XX, so no word is written as a tag, otherwise "
                                              "every entry that is not a bracket or a special (XX, or the POS "
                                              "tags)")
    words_in_target: str = setting("none", help="the task's [task] words_in_target: after_leaf = the token after "
                                                "each leaf is forced to be the next source word (it costs nothing: "
                                                "it is given); before_leaf = a leaf starts with the next source "
                                                "word, scored as the model's probability of writing any word "
                                                "there, and its tag follows; as_leaf = each leaf is the next "
                                                "source word; ahead = the first token and the token after each "
                                                "leaf but the last are forced to be the next source word (given, "
                                                "so free). Must match the task's setting", choices=WORD_MODES,
                                   same_as="task.words_in_target")
    punctuation_tags: list[str] = setting(EVALB_PUNCTUATION_TAGS, help="leaf labels the scorer deletes as "
                                          "punctuation (EVALB COLLINS.prm); with keep_pos_tags a word of "
                                          "punctuation_words gets one of them and any other word none, so the "
                                          "output keeps the sentence's punctuation and EVALB can score it; "
                                          "empty = no such rule")
    punctuation_words: list[str] = setting(PTB_PUNCTUATION_WORDS, help="source words that always take a "
                                           "punctuation tag (the Penn Treebank's)")
    either_words: list[str] = setting(PTB_EITHER_WORDS, help="source words free to take a punctuation tag or "
                                      "another (PTB: \"'\" is POS after a plural, '' as a closing quote), "
                                      "except right after a punctuation word, where they take a punctuation "
                                      "tag (wsj_0001-0159: 5 of 5 times)")
