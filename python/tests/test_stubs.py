"""ferry/_ferry.pyi against the module: every public name, method and
attribute is in the stubs with the right kind, and the stubs name nothing
the module lacks; py.typed is beside them (PEP 561)."""
import ast
import inspect
import os

import ferry
import ferry._ferry

PACKAGE = os.path.dirname(ferry.__file__)


def stub_tree():
    with open(os.path.join(PACKAGE, "_ferry.pyi")) as f:
        return ast.parse(f.read())


def stub_classes(tree):
    """{class name: set of public member names, inherited _Closable's
    included}"""
    classes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    names.add(item.target.id)
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in classes:
                    names |= classes[base.id]
            classes[node.name] = names
    return classes


def stub_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_") or n == "__version__"}


def public(cls):
    keep = {"__enter__", "__exit__", "__await__", "__init__"}
    names = set()
    for klass in cls.__mro__[:-1]:  # not object's
        if klass.__module__ not in ("ferry", "ferry._ferry"):
            continue
        for name in vars(klass):
            if not name.startswith("_") or name in keep:
                names.add(name)
    if cls.__init__ is not object.__init__ or cls.__new__ is not \
            object.__new__:
        names.add("__init__")
    return names


def test_py_typed_beside_the_stubs():
    assert os.path.isfile(os.path.join(PACKAGE, "py.typed"))
    assert os.path.isfile(os.path.join(PACKAGE, "_ferry.pyi"))


def test_every_module_name_is_stubbed_and_no_other():
    module = {n for n in vars(ferry._ferry) if not n.startswith("_")}
    module.add("__version__")
    assert stub_names(stub_tree()) - {"_Closable"} == module


def test_every_member_is_stubbed_and_no_other():
    classes = stub_classes(stub_tree())
    missing, extra = [], []
    for name, value in vars(ferry._ferry).items():
        if name.startswith("_") or not inspect.isclass(value):
            continue
        if issubclass(value, BaseException):
            continue  # their members are Exception's, and code
        have = public(value)
        if issubclass(value, tuple):  # Notification: its fields
            have = set(value._fields) if hasattr(value, "_fields") else {
                n for n in vars(value) if not n.startswith(("_", "n_"))}
        want = classes[name] - {"__init__"} if "__init__" not in have \
            else classes[name]
        missing += ["%s.%s" % (name, n) for n in sorted(have - want)]
        extra += ["%s.%s" % (name, n) for n in sorted(want - have)]
    assert missing == [], "in the module, not in _ferry.pyi"
    assert extra == [], "in _ferry.pyi, not in the module"
