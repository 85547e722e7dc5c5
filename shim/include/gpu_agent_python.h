/* gpu_agent_python.h: the Python-stack part of the probe contract, which only BPF
 * and the agent share (the shim has no part in it). Included by
 * gpu_agent_probes.h, after its types; checked by tests/test_contract.py with it. */
#ifndef GPU_AGENT_PYTHON_H
#define GPU_AGENT_PYTHON_H

/* ---- Python stacks (CPython 3.10 and later, default GIL build) ----
 *
 * The agent finds the interpreter of a process (its libpython or static
 * python binary: symbols through pyelftools, _Py_DebugOffsets from
 * _PyRuntime on 3.13+, a per-version table checked against PyCode_Type on
 * 3.10-3.12) and stores one ga_py_config per tgid in the BPF hash py_procs.
 * At each sampled launch (cuda_correlation) the BPF program then finds the
 * launching thread's PyThreadState by walking every interpreter's thread list
 * (thread_id == pthread_self(), read as the thread's fs base; or
 * native_thread_id == the kernel thread id), walks its frames without the GIL
 * and stores them, innermost first, in the LRU hash py_stacks under the same
 * ga_stack_key as the native frames in `stacks`.
 *
 * When Python frames were found, the stack_id used everywhere downstream
 * (corr_stacks, stacks, py_stacks, the aggregation keys, GA_EV_NEW_STACK) is
 * the native stack hash mixed with every frame's (code, stamp, instr, flags),
 * so two Python stacks above the same native stack stay apart. Without Python
 * frames (no config, a native thread) it is the shim's native hash unchanged.
 */
#define GA_PY_MAX_FRAMES 128       /* Python frames per stack (innermost kept) */
#define GA_PY_MAX_THREADS 256      /* thread states visited per lookup */
#define GA_PY_NO_INSTR 0xffffffffu /* ga_py_frame.instr when unknown */

/* ga_py_config.flags */
#define GA_PYC_FRAMEOBJ 0x1u       /* 3.10: frames are PyFrameObjects, fr_instr is
                                    * the int f_lasti (code units); every frame
                                    * is its own eval-loop call */
#define GA_PYC_CFRAME 0x2u         /* 3.11/3.12: ts_frame points to a _PyCFrame,
                                    * whose current_frame is at cframe_frame */
#define GA_PYC_IS_ENTRY 0x4u       /* 3.11: the byte at fr_owner (is_entry) != 0
                                    * marks the first frame of an eval-loop call */
#define GA_PYC_OWNER 0x8u          /* 3.12+: the byte at fr_owner (owner) >=
                                    * owner_shim marks a frame the interpreter
                                    * pushes on entry to the eval loop: not a
                                    * Python frame, but the end of a run */
#define GA_PYC_MATCH_PTHREAD 0x10u /* match ts_thread_id against the fs base
                                    * (x86_64 pthread_self(), read at
                                    * task_fsbase in the task_struct); else
                                    * match ts_native_tid against the thread id
                                    * (in pid namespace pidns_dev/pidns_ino
                                    * when pidns_ino != 0) */

struct ga_py_config {
    ga_u64 runtime;            /* address of _PyRuntime in the process */
    ga_u64 code_type;          /* address of PyCode_Type: a frame whose code
                                * object has another ob_type ends the walk */
    ga_u64 pidns_dev;          /* stat() of /proc/PID/ns/pid, for matching */
    ga_u64 pidns_ino;          /*   native_thread_id in a container */
    ga_u32 version;            /* PY_VERSION_HEX (informational) */
    ga_u32 flags;              /* GA_PYC_* */
    ga_u32 rt_interp_head;     /* _PyRuntime.interpreters.head */
    ga_u32 interp_next;        /* PyInterpreterState.next */
    ga_u32 interp_threads;     /* PyInterpreterState: head of its thread list */
    ga_u32 ts_next;            /* PyThreadState.next */
    ga_u32 ts_thread_id;       /* PyThreadState.thread_id (pthread_self()) */
    ga_u32 ts_native_tid;      /* PyThreadState.native_thread_id (3.11+) */
    ga_u32 ts_frame;           /* PyThreadState.frame/.cframe/.current_frame */
    ga_u32 cframe_frame;       /* _PyCFrame.current_frame (GA_PYC_CFRAME) */
    ga_u32 fr_previous;        /* f_back / previous */
    ga_u32 fr_code;            /* f_code / f_executable (low 3 bits masked) */
    ga_u32 fr_instr;           /* f_lasti / prev_instr / instr_ptr */
    ga_u32 fr_owner;           /* is_entry (3.11) or owner (3.12+) byte */
    ga_u32 fr_size;            /* bytes read per frame: covers every fr_* field */
    ga_u32 owner_shim;         /* owner >= this: interpreter-pushed frame */
    ga_u32 co_firstlineno;     /* PyCodeObject.co_firstlineno (int) */
    ga_u32 co_name;            /* co_qualname (co_name on 3.10) */
    ga_u32 co_code;            /* byte offset of the bytecode in the code object
                                * (co_code_adaptive, 3.11+) */
    ga_u32 co_size;            /* bytes read per code object: covers co_* */
    ga_u32 str_length;         /* PyASCIIObject.length */
    ga_u32 str_data;           /* compact ASCII data: sizeof(PyASCIIObject) */
    ga_u32 task_fsbase;        /* offsetof(struct task_struct, thread.fsbase) in
                                * the running kernel (from its BTF) */
    ga_u32 pad;
};

/* Validation stamp of a code object, taken by BPF at the sample and
 * recomputed by the agent from the process's memory: name8 = the 8 bytes at
 * the name object + str_data (its first characters), name_len = its length,
 * firstlineno = co_firstlineno. A code object freed and reallocated for
 * another function gets another stamp, so the agent never names a frame after
 * whatever lives at that address later. Arithmetic is modulo 2^64. */
#define GA_PY_STAMP_MUL 0x100000001b3ull  /* the 64-bit FNV prime */
#define GA_PY_STAMP(name8, name_len, firstlineno)                                    \
    (((ga_u64)(name8) * GA_PY_STAMP_MUL) ^ ((ga_u64)(ga_u32)(name_len) << 32) ^ \
     (ga_u64)(ga_u32)(firstlineno))

/* ga_py_frame.flags */
#define GA_PYF_ENTRY 0x1u          /* outermost frame of one eval-loop call: the
                                    * frames up to and including it replace one
                                    * native _PyEval_EvalFrameDefault frame */
/* ga_py_stack.flags */
#define GA_PYS_TRUNCATED 0x1u      /* more than GA_PY_MAX_FRAMES frames, or the
                                    * walk stopped at a frame it could not read */

struct ga_py_frame {
    ga_u64 code;               /* PyCodeObject address */
    ga_u64 stamp;              /* GA_PY_STAMP at the sample */
    ga_u32 instr;              /* byte offset of the current instruction in the
                                * bytecode, GA_PY_NO_INSTR if unknown */
    ga_u32 flags;              /* GA_PYF_* */
};

/* py_stacks: LRU hash, (tgid, stack id) -> Python frames, innermost first. */
struct ga_py_stack {
    ga_u32 nframes;
    ga_u32 flags;              /* GA_PYS_* */
    struct ga_py_frame frames[GA_PY_MAX_FRAMES];
};

#endif /* GPU_AGENT_PYTHON_H */
