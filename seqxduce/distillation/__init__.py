"""Sequence-level knowledge distillation (Kim & Rush 2016) as one step: `seqxduce distill TEACHER_RUN RECIPE --out
RUN` has the teacher (a run, its ensemble of members, or an imported model) decode the student recipe's training
sources with its own search, keeps the outputs as a distilled set keyed by what decided them, and trains the student
on it.

Read in this order: teacher.py (what the teacher is: its checkpoints, tokenizer files and search, and the key they
make), making.py (the set made once, resumably, by the streamed decode the caller hands in). The set's folder and
the task a student trains with are corpus.distilled's; engine.distill joins the two halves.
"""
