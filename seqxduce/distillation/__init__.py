"""Sequence-level knowledge distillation (Kim & Rush 2016) as one step: `seqxduce distill TEACHER_RUN RECIPE --out
RUN` has the teacher (a run, its ensemble of members, or an imported model) decode the student recipe's training
sources with its own search, keeps the outputs as a distilled set keyed by what decided them, and trains the student
on it.

Read in this order: student.py (the command as one typed request, Distill, done by distill(request, train, join)
with the student's training handed in by engine.distill), teacher.py (what the teacher is: the checkpoints decode
loads, decoding.decode.plan_run's, its tokenizer files and search, and the key they make), making.py (the set made
once, resumably, by the teacher's streamed decode), teacher_targets.py ([distill] word_kd: the teacher's top-k
next-token distributions over the student's pairs, which engine.train hands to the training run). The set's
folder, the task a student trains with and the soft targets' storage are corpus/'s.
"""
