#!/usr/bin/env python3
"""chat_golden.py - expected chat-template renderings for tests/test_chat_template.c.

Renders a fixed set of conversations with Jinja2 (the settings Hugging Face transformers uses:
sandboxed, trim_blocks, lstrip_blocks) from real template texts and writes, per template, one
file tests/data/chat/<source>.txt holding only what the C test needs:

    format <name>              the format kvtier must recognize (or is told with --chat-template)
    bos <escaped> / eos <escaped>
    marker <escaped>           each detection marker found in the template text (not the template)
    === <conv> <gen> <len>     then exactly <len> bytes of the rendering and a newline

The template texts are NOT copied into the repository; they are read at generation time from:
  - llama.cpp's models/templates/*.jinja and tests/test-chat-template.cpp (MIT), under
    --llama-cpp (default: the llama-cpp-python sdist's vendor/llama.cpp at /work/peer)
  - llama-cpp-python's llama_cpp/llama_chat_format.py (MIT) for the plain Llama 3 template
  - the SmolLM2-135M-Instruct GGUF's tokenizer.chat_template (--smollm2)
  - the Llama 2 chat template, which none of the above has: the one published with
    meta-llama/Llama-2-7b-chat-hf (tokenizer_config.json); only its marker strings and the
    renderings end up in tests/data.
Also writes tests/data/chat/conversations.txt (the messages, one per line, escaped).

usage: python3 tools/golden/chat_golden.py [--llama-cpp DIR] [--smollm2 GGUF] [--out tests/data/chat]
"""
import argparse
import os
import re
import struct
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONVERSATIONS = {
    "c1": [("user", "Hello")],
    "c2": [("system", "You are a helpful assistant."), ("user", "Hello")],
    "c3": [("system", "You are a helpful assistant."), ("user", "Hi there"),
           ("assistant", "Hello! How can I help?"), ("user", "What is 2+2?")],
    "c4": [("user", "  Tell me a joke.\n"), ("assistant", " Why did the chicken cross the road? "),
           ("user", "Why?")],
    "c5": [("system", " Be brief.\n"), ("user", "\u3000\u00dcn\u00efc\u00f6d\u00e9 \u65e5\u672c\u8a9e \U0001F642\u00a0")],
}

# the marker strings kvtier's detection (src/serve/chat_template.c) looks at
MARKERS = ["<|im_start|>", "<|im_sep|>", "<end_of_utterance>", "[INST]", " [INST]", "\"[INST]\"",
           "[SYSTEM_PROMPT]", "' [INST] ' + system_message", "[AVAILABLE_TOOLS]", "<<SYS>>",
           "bos_token + '[INST] '", "content.strip()", "<|assistant|>", "<|end|>", "<start_of_turn>",
           "<|start_header_id|>", "<|end_header_id|>", "Cutting Knowledge Date"]

LLAMA2_CHAT = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
               "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
               "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
               "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
               "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
               "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
               "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
               "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
               "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")


def esc(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def gguf_string(path, key):
    """tokenizer.chat_template from a GGUF v2/v3 file (a minimal reader of the KV section)."""
    with open(path, "rb") as f:
        data = f.read(8 << 20)
    if data[:4] != b"GGUF":
        raise ValueError(path + ": not a GGUF file")
    off = 8
    _n_tensors, n_kv = struct.unpack_from("<QQ", data, off)
    off += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def read_str(o):
        (n,) = struct.unpack_from("<Q", data, o)
        return data[o + 8:o + 8 + n].decode("utf-8"), o + 8 + n

    def skip(t, o):
        if t == 8:
            return read_str(o)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, o)
            o += 12
            for _ in range(n):
                o = skip(et, o)
            return o
        return o + sizes[t]

    for _ in range(n_kv):
        k, off = read_str(off)
        (t,) = struct.unpack_from("<I", data, off)
        off += 4
        if k == key and t == 8:
            return read_str(off)[0]
        off = skip(t, off)
    raise KeyError(key)


def cpp_template(test_cpp, name):
    """template_str of the named case in llama.cpp's tests/test-chat-template.cpp."""
    src = open(test_cpp, encoding="utf-8").read()
    i = src.index('/* .name= */ "' + name + '"')
    m = re.compile(r'/\* \.template_str= \*/ "((?:[^"\\]|\\.)*)"').search(src, i)
    return bytes(m.group(1), "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def py_constant(path, name):
    src = open(path, encoding="utf-8").read()
    m = re.search(r'^' + name + r' = "((?:[^"\\]|\\.)*)"', src, re.M)
    return bytes(m.group(1), "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def render(text, messages, gen, bos, eos):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    tmpl = env.from_string(text)
    return tmpl.render(messages=[{"role": r, "content": c} for r, c in messages], add_generation_prompt=gen,
                       bos_token=bos, eos_token=eos)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", default="/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp")
    ap.add_argument("--smollm2", default=os.path.expanduser("~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default="tests/data/chat")
    a = ap.parse_args()
    tdir = os.path.join(a.llama_cpp, "models", "templates")
    test_cpp = os.path.join(a.llama_cpp, "tests", "test-chat-template.cpp")
    chat_format_py = os.path.join(os.path.dirname(os.path.dirname(a.llama_cpp)), "llama_cpp", "llama_chat_format.py")

    def jf(name):
        return open(os.path.join(tdir, name), encoding="utf-8").read()

    # (source id, format, template text, bos, eos)
    sources = [
        ("smollm2", "chatml", gguf_string(a.smollm2, "tokenizer.chat_template"), "", "<|im_end|>"),
        ("qwen2.5", "chatml", jf("Qwen-Qwen2.5-7B-Instruct.jinja"), "", "<|im_end|>"),
        ("qwen3", "chatml", jf("Qwen-Qwen3-0.6B.jinja"), "", "<|im_end|>"),
        ("llama3", "llama3", py_constant(chat_format_py, "LLAMA3_INSTRUCT_CHAT_TEMPLATE"), "<|begin_of_text|>",
         "<|eot_id|>"),
        ("llama3.1", "llama3.1", jf("meta-llama-Llama-3.1-8B-Instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>"),
        ("llama3.2", "llama3.1", jf("meta-llama-Llama-3.2-3B-Instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>"),
        ("llama3.3", "llama3.1", jf("meta-llama-Llama-3.3-70B-Instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>"),
        ("llama2", "llama2", LLAMA2_CHAT, "<s>", "</s>"),
        ("mistral-v0", "mistral-v0",
         cpp_template(test_cpp, "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)"),
         "<s>", "</s>"),
        ("mistral-v1", "mistral-v1",
         cpp_template(test_cpp, "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)"),
         "<s>", "</s>"),
        ("mistral-nemo", "mistral-v3-tekken", jf("mistralai-Mistral-Nemo-Instruct-2407.jinja"), "<s>", "</s>"),
        ("gemma2", "gemma", jf("google-gemma-2-2b-it.jinja"), "<bos>", "<eos>"),
        ("phi3.5", "phi3", jf("microsoft-Phi-3.5-mini-instruct.jinja"), "<s>", "<|endoftext|>"),
    ]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "conversations.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# conversation<TAB>role<TAB>content (\\n \\t \\\\ escaped); written by tools/golden/chat_golden.py\n")
        for cid, msgs in CONVERSATIONS.items():
            for r, c in msgs:
                f.write("%s\t%s\t%s\n" % (cid, r, esc(c)))
    for sid, fmt, text, bos, eos in sources:
        out = bytearray()
        out += ("format %s\nbos %s\neos %s\n" % (fmt, esc(bos), esc(eos))).encode()
        for mk in MARKERS:
            if mk in text:
                out += ("marker %s\n" % esc(mk)).encode()
        # a chatml default system message is part of what detection reads: keep its literal
        m = re.search(r"<\|im_start\|>system(?:\n|\\n)([^'\"{}]+?)<\|im_end\|>", text)
        if m:
            out += ("marker %s\n" % esc(m.group(0))).encode()
        n = 0
        for cid, msgs in CONVERSATIONS.items():
            for gen in (False, True):
                try:
                    r = render(text, msgs, gen, bos, eos).encode("utf-8")
                except jinja2.exceptions.TemplateError as e:
                    print("%s %s: skipped (%s)" % (sid, cid, e), file=sys.stderr)
                    continue
                out += ("=== %s %d %d\n" % (cid, int(gen), len(r))).encode() + r + b"\n"
                n += 1
        with open(os.path.join(a.out, sid + ".txt"), "wb") as f:
            f.write(out)
        print("%s: %d renderings" % (sid, n))


if __name__ == "__main__":
    main()
