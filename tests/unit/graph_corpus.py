"""Four short documents that fall into two topics: the graph tests' communities."""

from __future__ import annotations

DOCS = {
    "statin": "Statin therapy lowers LDL cholesterol in adults. "
    "Statin therapy suits patients with high LDL cholesterol.",
    "heart": "High LDL cholesterol raises the risk of myocardial infarction. "
    "LDL cholesterol and myocardial infarction are linked.",
    "vitd": "Vitamin D deficiency weakens bone density. Vitamin D deficiency is common in Finland.",
    "bone": "Bone density drops with age. "
    "Calcium supports bone density, and calcium intake matters.",
}
