"""Offline batch inference with the built-in default model (SmolLM2-135M-Instruct).

Run: .venv/bin/python examples/offline_inference.py
"""

from vgraph import LLM, SamplingParams


def main() -> None:
    llm = LLM()  # no model: the built-in default, converted once into ~/.cache/vgraph
    questions = [
        "What is the capital of France?",
        "Name three colours of the rainbow.",
        "What is 12 times 12?",
    ]
    params = SamplingParams(temperature=0.0, max_tokens=48)
    outputs = llm.chat([[{"role": "user", "content": q}] for q in questions], params)
    for question, out in zip(questions, outputs):
        print(f"Q: {question}\nA: {out.outputs[0].text.strip()}\n")


if __name__ == "__main__":
    main()
